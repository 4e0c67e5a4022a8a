"""Failed logins per address: a sliding window, per address, forgotten on success, bounded in memory."""

from __future__ import annotations

from web.auth_limit import FailedLogins


def test_the_sixth_try_within_the_window_waits_for_the_oldest_failure_to_leave() -> None:
    limit = FailedLogins(max_failures=5, window_seconds=60)
    for t in range(5):
        assert limit.retry_after_seconds("10.0.0.1", now=float(t)) == 0
        limit.record_failure("10.0.0.1", now=float(t))
    assert limit.retry_after_seconds("10.0.0.1", now=4.0) == 56.0
    assert limit.retry_after_seconds("10.0.0.2", now=4.0) == 0  # another address is not held back
    assert limit.retry_after_seconds("10.0.0.1", now=60.0) == 0  # the failure at t=0 has left the window


def test_memory_stays_bounded_under_many_addresses() -> None:
    limit = FailedLogins(max_failures=5, window_seconds=60, max_addresses=100)
    for i in range(1000):
        limit.record_failure(f"addr-{i}", now=float(i) / 1000)
    assert len(limit._failures) <= 100

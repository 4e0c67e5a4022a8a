"""The unmapped families kept: by protocol and family, bounded in names and length, written at most every few
seconds, forgotten when idle; and the OTLP data points they stand for."""

from __future__ import annotations

from sqlalchemy import Engine

from collector.remote.retention import StagingRetention
from collector.remote.unmapped import MAX_NAME_LENGTH, UnmappedFamilies, data_points, family_name

T0 = 1_764_424_800.0


def test_a_histograms_series_are_one_family_and_a_long_name_is_cut() -> None:
    assert family_name("go_gc_duration_seconds_bucket") == "go_gc_duration_seconds"
    assert family_name("process_cpu_seconds_total") == "process_cpu_seconds_total"  # the name people query
    long = family_name("x" * 5000)
    assert len(long) == MAX_NAME_LENGTH and long.endswith("…")


def test_otlp_data_points_count_a_histogram_point_once() -> None:
    samples = {"h_bucket": 6, "h_count": 2, "h_sum": 2, "queue": 3, "requests_count": 4}
    assert data_points(samples) == {"h": 2, "queue": 3, "requests": 4}


def test_names_past_the_bound_are_not_kept_and_the_list_says_it_is_full(engine: Engine) -> None:
    """A sender's names are untrusted: 5,000 distinct ones keep 3 here (1,000 by default), in memory and stored."""
    kept = UnmappedFamilies(engine, max_families=3, flush_seconds=10.0)
    kept.note("remote_write", {f"name_{i:04d}": 1 for i in range(5000)}, T0)
    kept.note("otlp", {"app_queue_length": 2}, T0 + 1)  # not due: waits in memory
    assert [(f.source, f.name) for f in kept.families()] == [("remote_write", f"name_{i:04d}") for i in range(3)]
    assert kept.full() == ["remote_write"]
    kept.note("remote_write", {"name_0000": 5, "another": 1}, T0 + 11)  # due: both protocols written
    found = {(f.source, f.name): f for f in kept.families()}
    assert set(found) == {("otlp", "app_queue_length")} | {("remote_write", f"name_{i:04d}") for i in range(3)}
    assert (found[("remote_write", "name_0000")].samples, found[("remote_write", "name_0000")].last_seen) == (
        6,
        T0 + 11,
    )
    assert found[("otlp", "app_queue_length")].first_seen == T0 + 1


def test_a_family_not_sent_for_the_idle_time_is_forgotten(engine: Engine) -> None:
    kept = UnmappedFamilies(engine, flush_seconds=0.0)
    kept.note("remote_write", {"up": 1}, T0)
    kept.note("remote_write", {"scrape_duration_seconds": 1}, T0 + 3000)
    StagingRetention(engine, window_seconds=600.0, idle_series_seconds=3600.0).run(T0 + 3700)
    assert [f.name for f in kept.families()] == ["scrape_duration_seconds"]

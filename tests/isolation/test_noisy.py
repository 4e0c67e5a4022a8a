"""Noisy-neighbour enforcement window by window: throttle after N noisy windows, restore step by step after M calm."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from isolation.noisy import (
    Action,
    ActionKind,
    ActionReason,
    EnforcerSettings,
    EnforcerState,
    ScopeObservation,
    TenantUsage,
    decide,
)

SCOPE = "n1/gpu0"
TARGET_S = 0.1
MISS, CALM, BAND = 0.2, 0.05, 0.09  # p99 of the latency-critical tenant: over target, under 0.8 × target, between
SETTINGS = EnforcerSettings()


def window(p99: float | None, bulk_share: float | None = 0.85, **bulk: object) -> list[ScopeObservation]:
    """One window on one GPU: latency-critical ``chat`` at ``p99`` against 100 ms, batch ``bulk`` at its share."""
    noisy = TenantUsage("bulk", "batch", bulk_share, 2.0, **bulk)  # type: ignore[arg-type]
    return [ScopeObservation(SCOPE, (TenantUsage("chat", "latency_critical", 0.15, p99, TARGET_S), noisy))]


def run(
    windows: Sequence[list[ScopeObservation]], state: EnforcerState | None = None
) -> tuple[EnforcerState, list[list[Action]]]:
    """Feed one window a minute; answer the last state and each window's actions."""
    state = state or EnforcerState()
    out = []
    start = state.decided_at or 0.0
    for i, observations in enumerate(windows, start=1):
        state, actions = decide(state, observations, SETTINGS, now=start + 60.0 * i)
        out.append(actions)
    return state, out


def kinds(history: list[list[Action]]) -> list[list[str]]:
    return [[f"{a.kind}:{a.level_to:g}" for a in actions] for actions in history]


def test_a_noisy_batch_tenant_is_throttled_on_the_third_window_not_the_first() -> None:
    state, history = run([window(MISS)] * 3)
    assert kinds(history) == [[], [], ["throttle:0.5"]]
    (action,) = history[2]
    assert (action.reason, action.scope, action.tenant, action.level_from) == (
        ActionReason.NOISY_NEIGHBOUR,
        SCOPE,
        "bulk",
        1.0,
    )
    assert action.figures["compute_share"] == 0.85 and action.figures["victim"] == "chat"
    assert action.figures["victim_p99_seconds"] == MISS and action.figures["windows"] == 3
    assert "bulk took 85% of n1/gpu0" in action.message and "chat missed its SLO" in action.message
    assert state.level(SCOPE, "bulk") == 0.5 and state.level(SCOPE, "chat") == 1.0


def test_noise_that_goes_on_keeps_the_tenant_throttled_and_steps_down_to_the_floor() -> None:
    state, history = run([window(MISS)] * 14)
    assert [k for k in kinds(history) if k] == [["throttle:0.5"], ["throttle:0.25"], ["throttle:0.125"]]
    assert [i for i, actions in enumerate(history, start=1) if actions] == [3, 6, 9]
    assert state.level(SCOPE, "bulk") == SETTINGS.floor_level


def test_restore_is_step_by_step_and_only_after_m_calm_windows() -> None:
    throttled, _ = run([window(MISS)] * 6)
    assert throttled.level(SCOPE, "bulk") == 0.25
    state, history = run([window(CALM)] * 6, throttled)
    assert kinds(history) == [[], [], ["restore:0.5"], [], [], ["restore:1"]]
    assert history[2][0].reason == ActionReason.CALM and history[2][0].figures["windows"] == 3
    assert state.tenants == {}  # fully restored: nothing left to remember


def test_the_band_between_calm_and_miss_restores_nothing() -> None:
    throttled, _ = run([window(MISS)] * 3)
    state, history = run([window(BAND)] * 10, throttled)
    assert kinds(history) == [[]] * 10 and state.level(SCOPE, "bulk") == 0.5


def test_alternating_windows_never_flap() -> None:
    _, history = run([window(MISS), window(CALM)] * 6)
    assert kinds(history) == [[]] * 12
    throttled, _ = run([window(MISS)] * 3)
    state, history = run([window(CALM), window(MISS)] * 6, throttled)
    assert kinds(history) == [[]] * 12 and state.level(SCOPE, "bulk") == 0.5


def test_a_tenant_within_its_share_is_not_throttled_even_while_the_slo_is_missed() -> None:
    _, history = run([window(MISS, bulk_share=0.6)] * 6)
    assert kinds(history) == [[]] * 6


def test_over_its_own_quota_share_by_the_margin_is_noisy_too() -> None:
    _, history = run([window(MISS, bulk_share=0.45, quota_share=0.3)] * 3)  # 45 % > 30 % + 10 %
    assert kinds(history) == [[], [], ["throttle:0.5"]]
    assert history[2][0].figures["threshold"] == pytest.approx(0.4)


def test_a_latency_critical_tenant_is_never_throttled_on_behalf_of_another() -> None:
    tenants = (
        TenantUsage("chat", "latency_critical", 0.1, MISS, TARGET_S),
        TenantUsage("search", "latency_critical", 0.9, 0.05, TARGET_S),
    )
    _, history = run([[ScopeObservation(SCOPE, tenants)]] * 6)
    assert kinds(history) == [[]] * 6


@pytest.mark.parametrize(
    ("observations", "why"),
    [
        (window(MISS, bulk_share=None), "no usage sample for tenant bulk"),
        (window(None), "no p99 latency for latency-critical tenant chat"),
        ([], "no usage samples for the scope"),
        ([ScopeObservation(SCOPE, ())], "no usage samples for the scope"),
    ],
)
def test_missing_data_takes_no_action_says_so_and_restarts_the_streaks(
    observations: list[ScopeObservation], why: str
) -> None:
    state, _ = run([window(MISS)] * 5)  # throttled at 3, then a new streak of 2
    state, (held,) = run([observations], state)
    (action,) = held
    assert (action.kind, action.reason, action.tenant) == (ActionKind.HOLD, ActionReason.MISSING_SAMPLES, None)
    assert why in action.message and "keeping bulk at 0.5" in action.message
    assert state.level(SCOPE, "bulk") == 0.5
    _, after = run([window(MISS)] * 2, state)
    assert kinds(after) == [[], []]  # the streak of 2 before the gap does not count


def test_an_idle_latency_critical_tenant_is_not_missing_data() -> None:
    throttled, _ = run([window(MISS)] * 3)
    idle = TenantUsage("chat", "latency_critical", 0.0, None, TARGET_S)
    _, history = run([[ScopeObservation(SCOPE, (idle, TenantUsage("bulk", "batch", 1.0, 2.0)))]] * 3, throttled)
    assert kinds(history) == [[], [], ["restore:1"]]  # nobody to protect counts as calm
    assert "no latency-critical traffic" in history[2][0].message


def test_a_throttled_tenant_left_out_of_the_window_keeps_its_level() -> None:
    throttled, _ = run([window(MISS)] * 3)
    calm_chat_only = [ScopeObservation(SCOPE, (TenantUsage("chat", "latency_critical", 1.0, CALM, TARGET_S),))]
    state, history = run([calm_chat_only] * 5, throttled)
    assert kinds(history) == [[]] * 5 and state.level(SCOPE, "bulk") == 0.5


def test_time_must_move_forward_and_settings_are_checked() -> None:
    state, _ = decide(EnforcerState(), window(MISS), SETTINGS, now=100.0)
    with pytest.raises(ValueError, match="not after the last decision"):
        decide(state, window(MISS), SETTINGS, now=100.0)
    with pytest.raises(ValueError, match="noisy_compute_share"):
        EnforcerSettings(noisy_compute_share=1.2)
    with pytest.raises(ValueError, match="calm_windows"):
        EnforcerSettings(calm_windows=0)

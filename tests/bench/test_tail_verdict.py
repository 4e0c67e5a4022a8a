"""``bench.lib.tail_verdict``: the median round's quantile, the paired round bootstrap of an inflation, and the
verdict that holds only when the interval does."""

from __future__ import annotations

import pytest

from bench.lib.tail_verdict import (
    Interval,
    Verdict,
    bootstrap_inflation,
    inflation,
    judge,
    per_round_quantiles,
    pooled_quantile,
    round_quantile,
)

STEADY = [[float(ms) for ms in range(1, 101)] for _ in range(6)]  # six rounds, 1..100 ms each: p99 99 ms (nearest rank)


def scaled(rounds: list[list[float]], factor: float) -> list[list[float]]:
    return [[latency * factor for latency in latencies] for latencies in rounds]


def test_the_quantile_is_the_median_rounds_and_the_pooled_one_is_beside() -> None:
    rounds = [[1.0, 2.0], [3.0, 4.0], [100.0, 200.0]]
    assert per_round_quantiles(rounds, 50) == [1.0, 3.0, 100.0]
    assert round_quantile(rounds, 50) == 3.0
    assert round_quantile(rounds, 50, [0, 0, 1]) == 1.0  # round 0 drawn twice: 1 1 3
    assert round_quantile(rounds, 50, [0, 1]) == 2.0  # an even count: between the middle two
    assert pooled_quantile(rounds, 50) == 3.0  # nearest rank: the 3rd of 6
    with pytest.raises(ValueError):
        round_quantile([[]], 99)
    with pytest.raises(ValueError):
        pooled_quantile([[]], 99)


def test_a_burst_in_one_round_moves_the_pooled_p99_not_the_median_rounds() -> None:
    burst = [list(latencies) for latencies in STEADY]
    burst[3] = burst[3][:-10] + [1000.0] * 10  # ten requests of one round of six behind a 1 s burst of other work
    assert pooled_quantile(burst, 99) == 1000.0
    assert round_quantile(burst, 99) == 99.0 and inflation(burst, STEADY, 99) == 0.0


def test_inflation_is_the_ratio_of_pooled_quantiles_less_one() -> None:
    assert inflation(scaled(STEADY, 1.2), STEADY, 99) == pytest.approx(0.2)
    assert inflation(STEADY, STEADY, 99) == 0.0


def test_steady_rounds_give_a_tight_interval_around_the_value() -> None:
    spread = bootstrap_inflation(scaled(STEADY, 1.6), STEADY, 99, draws=200)
    assert spread.rounded() == [0.6, 0.6, 0.6]


def test_stalled_rounds_widen_the_interval_they_cannot_be_told_from() -> None:
    """Stalls in two rounds of six (a burst of other work) leave the median round alone, but the draws that take
    those rounds three times or more make it one of them: the interval shows how much the run can tell."""
    stalled = scaled(STEADY, 1.05)
    for index in (1, 4):
        stalled[index] = stalled[index][:-4] + [400.0] * 4  # four requests behind a 400 ms stall
    spread = bootstrap_inflation(stalled, STEADY, 99, draws=500)
    assert spread.value == pytest.approx(0.05) and spread.low == pytest.approx(0.05)
    assert spread.high > 2.0  # 400 ms against 99 ms
    assert bootstrap_inflation(stalled, STEADY, 99, draws=500) == spread  # seeded: the same draws every time


def test_rounds_are_paired() -> None:
    with pytest.raises(ValueError, match="paired"):
        bootstrap_inflation(STEADY, STEADY[:5], 99)


def test_one_round_has_no_spread() -> None:
    spread = bootstrap_inflation(scaled(STEADY[:1], 1.3), STEADY[:1], 99)
    assert spread.low == spread.value == spread.high == pytest.approx(0.3)
    assert spread.rounded() == [0.3, 0.3, 0.3]


@pytest.mark.parametrize(
    ("isolated", "unisolated", "verdict"),
    [
        ((0.01, 0.03, 0.08), (0.6, 0.9, 1.4), Verdict.MET),
        ((0.01, 0.03, 0.12), (0.6, 0.9, 1.4), Verdict.UNCLEAR),  # isolated may be past 10 %
        ((0.01, 0.03, 0.08), (0.4, 0.9, 1.4), Verdict.UNCLEAR),  # the noise may be under 50 %
        ((0.11, 0.2, 0.3), (0.6, 0.9, 1.4), Verdict.MISSED),  # isolated past 10 % in every draw
        ((0.01, 0.03, 0.08), (0.1, 0.2, 0.45), Verdict.MISSED),  # no noise to isolate from
        ((0.10, 0.10, 0.10), (0.5, 0.5, 0.5), Verdict.MET),  # the bounds themselves meet the targets
    ],
)
def test_the_verdict_holds_only_when_the_interval_does(
    isolated: tuple[float, float, float], unisolated: tuple[float, float, float], verdict: Verdict
) -> None:
    low, value, high = isolated
    u_low, u_value, u_high = unisolated
    assert judge(Interval(value, low, high), Interval(u_value, u_low, u_high), 0.10, 0.50).verdict is verdict


def test_the_reason_names_the_bound_the_run_cannot_resolve() -> None:
    unclear = judge(Interval(0.03, 0.01, 0.12), Interval(0.9, 0.6, 1.4), 0.10, 0.50)
    assert unclear.reason == "isolated +3% (+1% to +12%) straddles its bound: the rounds' spread cannot tell"
    quiet = judge(Interval(0.03, 0.01, 0.08), Interval(0.2, 0.1, 0.45), 0.10, 0.50)
    assert quiet.reason == "unisolated +20% (+10% to +45%): under 50%, no noise to isolate from"


def test_one_round_is_never_a_verdict() -> None:
    one = judge(Interval(0.03, 0.03, 0.03), Interval(0.9, 0.9, 0.9), 0.10, 0.50, rounds=1)
    assert one.verdict is Verdict.UNCLEAR and one.reason.endswith("from one round: no spread to judge by")

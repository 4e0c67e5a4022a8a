"""The 500 ms tick does not drift, whatever each tick's work costs, and skips rather than bunches when late."""

from __future__ import annotations

import random

import pytest

from inference_agent.ticker import Ticker, next_tick


class SimulatedTime:
    """A monotonic clock that only moves when the ticker waits or a tick works."""

    def __init__(self) -> None:
        self.now = 100.0

    def clock(self) -> float:
        return self.now

    def wait(self, seconds: float) -> bool:
        self.now += seconds
        return False  # not stopped


@pytest.mark.parametrize(
    ("last", "now", "expected"),
    [
        (-1, 0.0, (0, 0.0, 0)),
        (0, 0.2, (1, 0.5, 0)),
        (4, 2.4, (5, 2.5, 0)),
        (4, 3.15, (6, 3.0, 1)),  # tick 5 (2.5) is 1.3 periods late: skip it, run tick 6
        (4, 5.0, (10, 5.0, 5)),  # exactly on tick 10's deadline
    ],
)
def test_next_tick(last: int, now: float, expected: tuple[int, float, int]) -> None:
    assert next_tick(0.0, 0.5, last, now) == expected


def test_no_drift_over_100_ticks_with_work_in_every_tick() -> None:
    time = SimulatedTime()
    ticker = Ticker(0.5, clock=time.clock, wait=time.wait)
    rng = random.Random(7)
    ticks = []
    for _ in range(100):
        tick = ticker.next()
        assert tick is not None
        ticks.append(tick)
        time.now += rng.uniform(0.001, 0.2)  # probes take up to 200 ms
    assert [t.index for t in ticks] == list(range(100))
    assert ticks[-1].deadline == pytest.approx(100.0 + 99 * 0.5)
    assert max(t.lateness_s for t in ticks) == pytest.approx(0.0)
    assert sum(t.skipped for t in ticks) == 0


def test_an_overrunning_tick_skips_the_missed_deadlines() -> None:
    time = SimulatedTime()
    ticker = Ticker(0.5, clock=time.clock, wait=time.wait)
    assert ticker.next() is not None
    time.now += 1.7  # a stall: ticks 1 (100.5) and 2 (101.0) are over a period late, tick 3 (101.5) only 0.2 s
    tick = ticker.next()
    assert tick is not None
    assert (tick.index, tick.skipped) == (3, 2)
    assert tick.lateness_s == pytest.approx(0.2)
    nxt = ticker.next()
    assert nxt is not None
    assert nxt.index == 4
    assert nxt.deadline == pytest.approx(102.0)
    assert nxt.lateness_s == pytest.approx(0.0)


def test_a_bad_period_is_refused() -> None:
    with pytest.raises(ValueError, match="period_s"):
        Ticker(0)

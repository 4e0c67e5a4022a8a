"""Live forecast accuracy: each past forecast scored once its targets arrive, windows of scores, the trust rule, and
the forecast loop storing, over simulated hours, exactly the scores a replay of its own forecasts gives."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
from sqlalchemy import Engine, insert

from collector.tables import NO_DEVICE, node_reports, nodes, rollups_1m, series_latest
from fleet.pools import PoolSpec, PoolStore
from predictor.accuracy import (
    MIN_POINTS_TO_JUDGE,
    ForecastScore,
    WindowAccuracy,
    distrusted,
    score_forecast,
    window_accuracy,
)
from predictor.base import History
from predictor.loop import ForecastJob, ForecastSettings
from predictor.store import ForecastStore, SubjectKind
from tests.support.clock import FakeClock
from tests.support.fleet_reader import fleet_reader
from tests.support.rollups import rollup_row, set_watermark

MINUTE = 60.0


def history(values: list[float], start: float = 0.0) -> History:
    return History(np.array(values, dtype=float), MINUTE, start)


def test_the_worked_example_of_the_module() -> None:
    actual = history([100.0, 110.0, 130.0])
    points = [(60.0, 108.0, 100.0, 115.0), (120.0, 120.0, 105.0, 125.0)]
    score = score_forecast(0.0, points, actual, capacity=None, probability=None)
    assert score == ForecastScore(0.0, 2, 12.0, 40.0, 1, None, None)
    assert window_accuracy("24h", [score]).mase == pytest.approx(0.3)
    assert window_accuracy("24h", [score]).coverage90 == 0.5


def test_a_forecast_is_scored_only_once_all_its_targets_have_come_and_gaps_are_left_out() -> None:
    points = [(60.0, 1.0, 0.0, 2.0), (120.0, 1.0, 0.0, 2.0)]
    assert score_forecast(0.0, points, history([1.0, 1.0]), capacity=None, probability=None) is None  # 120 not yet
    gap = score_forecast(0.0, points, history([1.0, math.nan, 3.0]), capacity=None, probability=None)
    assert gap is not None and gap.points == 1 and gap.abs_error == 2.0 and gap.naive_error == 2.0
    # the origin in a gap holds the last value before it, as the naive forecast would
    held = score_forecast(
        60.0, [(120.0, 5.0, 4.0, 6.0)], history([2.0, math.nan, 5.0]), capacity=None, probability=None
    )
    assert held is not None and held.naive_error == 3.0


@pytest.mark.parametrize(
    ("probability", "peak", "warned", "saturated"),
    [(0.9, 120.0, True, True), (0.9, 80.0, True, False), (0.1, 120.0, False, True), (0.1, 80.0, False, False)],
)
def test_saturation_is_judged_against_the_capacity_the_forecast_was_made_with(
    probability: float, peak: float, warned: bool, saturated: bool
) -> None:
    actual = history([50.0, peak])
    score = score_forecast(0.0, [(60.0, 60.0, 40.0, 90.0)], actual, capacity=100.0, probability=probability)
    assert score is not None and (score.warned, score.saturated) == (warned, saturated)


def test_precision_and_recall_over_a_window() -> None:
    def s(warned: bool, saturated: bool) -> ForecastScore:
        return ForecastScore(0.0, 1, 1.0, 1.0, 1, warned, saturated)

    scores = [s(True, True), s(True, True), s(True, False), s(False, True), s(False, False)]
    found = window_accuracy("7d", scores)
    assert found.saturation_precision == pytest.approx(2 / 3) and found.saturation_recall == pytest.approx(2 / 3)
    assert window_accuracy("7d", [s(False, False)]).saturation_precision is None  # no warning: nothing to be right


@pytest.mark.parametrize(
    ("points", "mase", "coverage", "says"),
    [
        (MIN_POINTS_TO_JUDGE, 1.2, 0.9, "worse than naive"),
        (MIN_POINTS_TO_JUDGE, 0.8, 0.6, "covered 60 %"),
        (MIN_POINTS_TO_JUDGE, 0.8, 0.9, None),
        (MIN_POINTS_TO_JUDGE - 1, 3.0, 0.1, None),  # too few points to judge: trusted
    ],
)
def test_a_forecast_worse_than_naive_or_badly_covered_is_distrusted(
    points: int, mase: float, coverage: float, says: str | None
) -> None:
    reason = distrusted(WindowAccuracy("24h", 10, points, mase, coverage, None, None))
    assert (reason is None) if says is None else (reason is not None and says in reason)


def seed(engine: Engine, start: float, minutes: int, demand: Any) -> None:
    rows = [
        rollup_row("node-a", NO_DEVICE, "chat", start + i * MINUTE, request_rate_per_second=demand(i))
        for i in range(minutes)
    ]
    with engine.begin() as conn:
        conn.execute(insert(rollups_1m), rows)
        set_watermark(conn, start + minutes * MINUTE)
        conn.execute(insert(nodes).values(id="node-a", first_seen=start, last_seen=start))
        conn.execute(insert(series_latest).values(node_id="node-a", device=NO_DEVICE, pool="chat", ts=start))
        report = {"ts": start, "pools": {"chat": {"ready": 2}}}
        conn.execute(insert(node_reports).values(node_id="node-a", ts=start, received_at=start, report=report))


def test_the_stored_scores_equal_a_replay_of_the_loops_own_forecasts(engine: Engine, clock: FakeClock) -> None:
    """Two simulated hours of one forecast a minute (time through the injected clock): what the loop stored as the
    pool's accuracy is what scoring its forecasts, kept as it made them, against the seeded truth gives."""
    rng = np.random.default_rng(7)
    minutes = 180
    truth = [40 + 15 * math.sin(i / 20) + rng.normal(0, 3) for i in range(minutes)]
    start = clock() // MINUTE * MINUTE - 60 * MINUTE
    PoolStore(engine).create("chat", PoolSpec(replica_capacity=30.0), now=clock())
    seed(engine, start, minutes, lambda i: truth[i])
    job = ForecastJob(engine, ForecastSettings(horizon_seconds=600.0), fleet=fleet_reader(engine))
    store = ForecastStore(engine)
    made: list[tuple[float, list[tuple[float, float, float, float]]]] = []
    for minute in range(61, minutes + 1):  # an hour of history first, then one cycle a minute
        clock.now = start + minute * MINUTE + 1
        job.run(clock())
        stored = store.get(SubjectKind.POOL, "chat")
        assert stored is not None and stored.good is not None
        if not made or made[-1][0] != stored.good.origin_ts:
            made.append((stored.good.origin_ts, [(p.ts, p.yhat, p.lo, p.hi) for p in stored.good.points]))
    stored = store.get(SubjectKind.POOL, "chat")
    assert stored is not None and stored.accuracy is not None
    day = stored.accuracy["24h"]
    known = History(np.array(truth), MINUTE, start)  # what the last cycle had read: every seeded minute
    replayed = [s for o, pts in made if (s := score_forecast(o, pts, known, capacity=None, probability=None))]
    expected = window_accuracy("24h", replayed)
    assert day.forecasts == expected.forecasts == len(made) - 10  # the last 10 still wait for their targets
    assert day.points == expected.points
    assert day.mase == pytest.approx(expected.mase) and day.coverage90 == pytest.approx(expected.coverage90)
    assert day.mase is not None and 0 < day.mase < 1.5 and stored.accuracy["7d"].points == day.points


def test_a_flat_series_forecast_to_a_rounding_is_covered() -> None:
    from predictor.backtest import coverage

    flat = History(np.full(40, 5.0), 60.0, start_ts=0.0)
    ts = float(flat.start_ts + 20 * 60)
    points = [(ts + 60 * k, 5.000000000000001, 5.000000000000001, 5.000000000000001) for k in range(1, 4)]
    scored = score_forecast(ts, points, flat, capacity=None, probability=None)
    assert scored is not None and scored.covered == 3  # was 0: exact comparisons missed 5.0 against 5.000000000000001
    band = np.full(3, 5.000000000000001)
    assert coverage(band, band, np.full(3, 5.0)) == 1.0
    assert coverage(band, band, np.full(3, 5.1)) == 0.0  # a real miss stays a miss

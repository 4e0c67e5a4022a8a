"""Live forecast accuracy over simulated hours (issue 21): ``python -m bench.forecast_accuracy [--quick]``.

The forecast loop (``predictor.loop.ForecastJob``, the server's own, on SQLite) runs once a simulated minute for 24
hours (``--quick``: 6) through the injected clock, over a pool whose demand is a ServeGen trace
(``data/traces/series/servegen_m-large_requests_per_10min.csv``) made minute-level by ``bench.lib.minute_series``
(each 10-minute window's rate interpolated between window midpoints, Poisson arrivals per minute). Twelve hours of
history come first. The pool's capacity is two replicas of 0.55× the trace's median rate, so it saturates at the
daily peaks.

Measured: what the loop stored as the pool's accuracy over the last 24 h (MASE against naive, 90 % coverage,
saturation precision and recall), against the baseline — the same forecasts, kept as the loop made them, scored
offline against the same demand (``predictor.accuracy.score_forecast``, as a backtest of those points would).
``ratio`` is stored MASE over replayed MASE (1.0: the live scores are the backtest's). The last line of stdout is one
JSON object.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import tempfile
import time
from typing import Any

import numpy as np
from sqlalchemy import insert

from bench.lib.minute_series import minute_demand
from bench.lib.progress import progress_line
from collector.database import make_engine
from collector.rollups import WATERMARK_NAME
from collector.tables import (
    NO_DEVICE,
    ROLLUP_STATS,
    job_state,
    metadata,
    node_reports,
    nodes,
    rollup_column,
    rollups_1m,
    series_latest,
)
from fleet.pools import PoolSpec, PoolStore
from fleet.view import FleetReader
from migrations import schema  # noqa: F401  (every table on the metadata)
from predictor.accuracy import score_forecast, window_accuracy
from predictor.base import History
from predictor.loop import ForecastJob, ForecastSettings
from predictor.store import ForecastStore, SubjectKind

MINUTE = 60.0
HISTORY_HOURS = 12


progress = progress_line("forecast_accuracy")


def rollup_rows(start: float, demand: list[float]) -> list[dict[str, Any]]:
    rows = []
    for i, value in enumerate(demand):
        row: dict[str, Any] = {c.name: None for c in rollups_1m.columns}
        row.update(node_id="node-a", device=NO_DEVICE, pool="chat", bucket=start + i * MINUTE, samples=120)
        for stat in ROLLUP_STATS:
            row[rollup_column("request_rate_per_second", stat)] = value
        rows.append(row)
    return rows


def run(hours: int) -> dict[str, Any]:
    minutes = (HISTORY_HOURS + hours) * 60
    demand = [float(v) for v in minute_demand("servegen_m-large_requests_per_10min", minutes).values]
    per_replica = 0.55 * float(np.median(demand))
    with tempfile.TemporaryDirectory(prefix="bench-accuracy-") as folder:
        engine = make_engine(f"sqlite:///{folder}/bench.db")
        metadata.create_all(engine)
        start = 1_764_000_000.0 // MINUTE * MINUTE
        with engine.begin() as conn:
            conn.execute(insert(rollups_1m), rollup_rows(start, demand))
            conn.execute(insert(job_state).values(name=WATERMARK_NAME, watermark=start + minutes * MINUTE))
            conn.execute(insert(nodes).values(id="node-a", first_seen=start, last_seen=start))
            conn.execute(insert(series_latest).values(node_id="node-a", device=NO_DEVICE, pool="chat", ts=start))
        PoolStore(engine).create("chat", PoolSpec(replica_capacity=per_replica), now=start)
        clock = {"now": start}
        fleet = FleetReader(engine, node_down_after_seconds=1e9, cpu_replicas_per_node=1)
        job = ForecastJob(engine, ForecastSettings(), fleet=fleet)
        store = ForecastStore(engine)
        made: list[tuple[float, list[tuple[float, float, float, float]], float | None, float | None]] = []
        began = time.perf_counter()
        for minute in range(HISTORY_HOURS * 60 + 1, minutes + 1):
            clock["now"] = start + minute * MINUTE + 1
            with engine.begin() as conn:  # two ready replicas, reported now
                report = {"ts": clock["now"], "pools": {"chat": {"ready": 2}}}
                conn.execute(node_reports.delete())
                conn.execute(
                    insert(node_reports).values(
                        node_id="node-a", ts=clock["now"], received_at=clock["now"], report=report
                    )
                )
            job.run(clock["now"])
            stored = store.get(SubjectKind.POOL, "chat")
            if stored is None or stored.good is None:
                continue
            good = stored.good
            if not made or made[-1][0] != good.origin_ts:
                saturation = good.saturation or {}
                points = [(p.ts, p.yhat, p.lo, p.hi) for p in good.points]
                made.append((good.origin_ts, points, saturation.get("capacity"), saturation.get("probability")))
            if minute % 240 == 0:
                progress(f"{(minute - HISTORY_HOURS * 60) / 60:.0f} simulated hours, {len(made)} forecasts")
        seconds = time.perf_counter() - began
        final = store.get(SubjectKind.POOL, "chat")
        engine.dispose()
    assert final is not None and final.accuracy is not None
    live = final.accuracy["24h"]
    truth = History(np.array(demand), MINUTE, start)
    replayed = window_accuracy(
        "24h",
        [
            s
            for origin, points, capacity, probability in made
            if origin >= clock["now"] - 86_400
            and (s := score_forecast(origin, points, truth, capacity=capacity, probability=probability)) is not None
            and points[-1][0] <= start + (minutes - 1) * MINUTE
        ],
    )
    ratio = live.mase / replayed.mase if live.mase and replayed.mase else math.nan
    return {
        "bench": "forecast_accuracy",
        "simulated_hours": hours,
        "cycles": hours * 60,
        "seconds": round(seconds, 1),
        "forecasts_scored": live.forecasts,
        "points_scored": live.points,
        "mase": _round(live.mase),
        "coverage90": _round(live.coverage90),
        "saturation_precision": _round(live.saturation_precision),
        "saturation_recall": _round(live.saturation_recall),
        "baseline": "the loop's own forecasts, kept as made, scored offline against the same demand",
        "baseline_mase": _round(replayed.mase),
        "baseline_coverage90": _round(replayed.coverage90),
        "baseline_forecasts": replayed.forecasts,
        "ratio": round(ratio, 6),
    }


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 6)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.forecast_accuracy", description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="6 simulated hours instead of 24")
    args = parser.parse_args(argv)
    print(json.dumps(run(6 if args.quick else 24)))
    return 0


if __name__ == "__main__":
    sys.exit(main())

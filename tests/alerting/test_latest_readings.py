"""The evaluator's latest readings: a tick reads the series written since the last one, a full read each minute."""

from __future__ import annotations

from typing import Any

from sqlalchemy import Engine, update

from alerting.latest_readings import FULL_READ_SECONDS, LatestReadings
from collector.skipped_rows import Job, SkippedRows
from collector.tables import NO_POOL, series_latest

T0 = 1_764_424_800.0


def put(engine: Engine, node: str, value: float, updated_at: float | None) -> None:
    row: dict[str, Any] = {"node_id": node, "device": 0, "pool": NO_POOL, "ts": T0, "extra": None}
    row |= {"gpu_utilization_ratio": value, "updated_at": updated_at}
    with engine.begin() as conn:
        if conn.execute(update(series_latest).where(series_latest.c.node_id == node).values(**row)).rowcount == 0:
            conn.execute(series_latest.insert(), [row])


def values(latest: LatestReadings, engine: Engine, now: float) -> dict[str, float]:
    with engine.connect() as conn:
        return {r.node: r.values["gpu_utilization_ratio"] for r in latest.read(conn, now, SkippedRows(Job.ALERTS))}


def test_a_tick_reads_what_was_written_since_the_last_and_a_full_read_catches_the_rest(engine: Engine) -> None:
    latest = LatestReadings()
    put(engine, "a", 0.1, T0)
    put(engine, "b", 0.2, T0)
    assert values(latest, engine, T0 + 1) == {"a": 0.1, "b": 0.2}  # the first read is a full one
    put(engine, "a", 0.3, T0 + 1.5)  # written after that read
    put(engine, "b", 0.4, T0 - 60)  # stamped long before it (or before the column existed): not read yet
    put(engine, "c", 0.5, T0 + 1.8)  # a new series
    assert values(latest, engine, T0 + 2) == {"a": 0.3, "b": 0.2, "c": 0.5}
    assert list(values(latest, engine, T0 + 3)) == ["a", "b", "c"]  # in key order
    assert values(latest, engine, T0 + 1 + FULL_READ_SECONDS) == {"a": 0.3, "b": 0.4, "c": 0.5}

"""``bench.ingest``'s two baselines store every row they time, on both backends' real schemas (a baseline whose
insert the schema refuses, as a conflict target the partitioned key no longer matches, fails here, not in a run)."""

from __future__ import annotations

from sqlalchemy import Engine, func, select

from bench.ingest import baseline_rows, bulk_insert_rate, empty_samples, raw_insert_rate
from bench.lib.simulated_agents import PushShape
from collector.tables import samples


def stored(engine: Engine) -> int:
    with engine.connect() as conn:
        return int(conn.scalar(select(func.count()).select_from(samples)) or 0)


def test_both_baselines_store_every_row_they_time(engine: Engine) -> None:
    rows = baseline_rows(["node-a", "node-b"], {}, PushShape(gpus=8, batch_ticks=2), 300)
    assert bulk_insert_rate(engine, rows) > 0 and stored(engine) == 300
    empty_samples(engine)
    assert raw_insert_rate(engine, rows) > 0 and stored(engine) == 300

"""What the forecast loop reads: capacity observations divide a pool's rate by the replicas ready at the time."""

from __future__ import annotations

import pytest
from sqlalchemy import Engine

from collector.batch import SampleBatch
from collector.ingest import SampleWriter
from collector.node_reports import store_report
from collector.tables import nodes
from predictor.capacity import ReplicaObservation
from predictor.inputs import CAPACITY_SAMPLE_EVERY, replica_observations
from tests.conftest import pool_sample
from wire.control import NodeReport

T0 = 1_764_424_800.0


def samples(engine: Engine, node: str, *at: tuple[float, float]) -> None:
    """Pool samples of ``chat`` at (ts, rate); seqs that the learner reads (one in CAPACITY_SAMPLE_EVERY)."""
    rows = [
        {
            **pool_sample(
                (i + 1) * CAPACITY_SAMPLE_EVERY,
                ts,
                pool="chat",
                request_rate_per_second=rate,
                request_latency_p99_seconds=0.5,
            )
        }
        for i, (ts, rate) in enumerate(at)
    ]
    batch = SampleBatch.parse({"node_id": node, "samples": rows})
    SampleWriter(engine, late_after_seconds=1e9).write_batch(batch, received_at=T0)


def ready(engine: Engine, node: str, ts: float, replicas: int) -> None:
    report = NodeReport.model_validate({"ts": ts, "pools": {"chat": {"ready": replicas}}})
    with engine.begin() as conn:
        store_report(conn, node, report, received_at=ts)


def test_each_sample_is_divided_by_the_ready_replicas_of_its_nodes_last_report_at_or_before_it(
    engine: Engine,
) -> None:
    """node-a reported 2 ready before the window and 4 from T0 + 20; node-b (an external engine) never reported: one
    replica. A report of 0 ready leaves the sample out."""
    ready(engine, "node-a", T0 - 600, 2)
    ready(engine, "node-a", T0 + 20, 4)
    ready(engine, "node-a", T0 + 40, 0)
    ready(engine, "node-c", T0 + 10, 8)  # another node's reports are not node-a's
    samples(engine, "node-a", (T0 + 10, 40.0), (T0 + 20, 40.0), (T0 + 30, 80.0), (T0 + 50, 10.0))
    samples(engine, "node-b", (T0 + 10, 12.0))

    with engine.connect() as conn:
        found = replica_observations(conn, "chat", "request_rate_per_second", start=T0, end=T0 + 60)

    assert sorted(o.rate for o in found) == pytest.approx([10.0, 12.0, 20.0, 20.0])
    assert ReplicaObservation(20.0, 0.5) in found


def test_every_scrape_of_a_remote_write_node_counts_one_in_five_of_an_agents(engine: Engine) -> None:
    """An agent's 2 Hz samples are thinned by seq; a Prometheus-fed node's come a scrape apart, all of them read."""
    rows = [pool_sample(seq, T0 + seq, pool="chat", request_rate_per_second=1.0) for seq in range(1, 11)]
    for node in ("agent-node", "scraped-node"):
        SampleWriter(engine, late_after_seconds=1e9).write_batch(
            SampleBatch.parse({"node_id": node, "samples": rows}), received_at=T0
        )
    with engine.begin() as conn:
        conn.execute(nodes.update().where(nodes.c.id == "scraped-node").values(source="remote_write"))
        found = replica_observations(conn, "chat", "request_rate_per_second", start=T0, end=T0 + 60)
    assert len(found) == 10 + 10 // CAPACITY_SAMPLE_EVERY

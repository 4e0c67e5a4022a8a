"""``bench.soak``: the lazy spool of a simulated node, the figures it reports, and the count of lost samples by
``seq`` in the database; then a short real run against a server on PostgreSQL."""

from __future__ import annotations

import gzip
import json
from typing import Any

import pytest
from sqlalchemy import Engine, create_engine, text
from sqlalchemy.exc import OperationalError

from bench.lib.databases import POSTGRES_ADMIN_URL
from bench.lib.lost_samples import lost_by_seq
from bench.soak import SoakConfig, SoakNode, run, slope_per_hour
from collector.tables import NO_DEVICE, NO_POOL, samples
from inference_agent.probes.replay import load_recording
from tests.support.availability import unavailable
from wire import columnar

STARTED = 1_764_424_800.0


def node(gpus: int = 2) -> SoakNode:
    return SoakNode("soak-node-0001", gpus, seed=3, recording=load_recording(), started=STARTED)


def decode(body: bytes) -> dict[str, Any]:
    decoded: dict[str, Any] = json.loads(gzip.decompress(body))
    return decoded


def test_due_ticks_count_what_was_sampled_and_not_yet_sent() -> None:
    soak = node()
    assert soak.due_ticks(STARTED) == 1  # the first tick is sampled at the start
    assert soak.due_ticks(STARTED + 2.4) == 5  # ticks at 0, 0.5, 1.0, 1.5, 2.0 s
    soak.next_body(STARTED + 2.4, max_ticks=3)
    assert soak.due_ticks(STARTED + 2.4) == 2


def test_a_body_carries_due_ticks_in_seq_order_and_is_resent_until_acknowledged() -> None:
    soak = node(gpus=2)
    first = soak.next_body(STARTED + 1.0, max_ticks=200)
    assert first is not None
    raw, rows, last_seq, content_type = first
    body = decode(raw)
    assert content_type == "application/json"
    assert rows == 3 * 4 == len(body["samples"]) and last_seq == 12  # 3 ticks × (2 GPUs + node + pool)
    assert [s["seq"] for s in body["samples"]] == list(range(1, 13))
    assert sorted({s["ts"] for s in body["samples"]}) == [STARTED, STARTED + 0.5, STARTED + 1.0]
    assert [s["device"] for s in body["samples"][:4]] == [0, 1, None, None]
    assert set(body["samples"][0]["metrics"]) >= {"gpu_utilization_ratio", "gpu_power_watts"}
    assert len(body["inventory"]["gpus"]) == 2
    # a failed push sends the very same body again (same seq); an acknowledged one makes room for the next
    assert soak.next_body(STARTED + 5.0, max_ticks=200) == first
    soak.unacknowledged, soak.registered = None, True
    second = soak.next_body(STARTED + 2.0, max_ticks=200)
    assert second is not None
    assert decode(second[0])["samples"][0]["seq"] == 13
    assert "inventory" not in decode(second[0])
    soak.unacknowledged = None
    compact = soak.next_body(STARTED + 3.0, max_ticks=200, compact=True)  # once the server offered it
    assert compact is not None and compact[3] == columnar.MEDIA_TYPE
    assert [s["seq"] for s in columnar.decode_to_json(gzip.decompress(compact[0]))["samples"]] == list(range(21, 29))


@pytest.mark.parametrize(
    ("points", "expected"),
    [
        ([(0.0, 100.0), (60.0, 101.0), (120.0, 102.0)], 60.0),  # 1 MB a minute → 60 MB an hour
        ([(0.0, 100.0), (60.0, 100.0), (120.0, 100.0)], 0.0),
        ([(0.0, 100.0), (60.0, 101.0)], None),  # too few points for a slope
    ],
)
def test_slope_per_hour(points: list[tuple[float, float]], expected: float | None) -> None:
    assert slope_per_hour(points) == (None if expected is None else pytest.approx(expected))


def store(engine: Engine, node_id: str, seqs: list[int]) -> None:
    rows = [{"node_id": node_id, "seq": seq, "ts": STARTED + seq, "device": NO_DEVICE, "pool": NO_POOL} for seq in seqs]
    with engine.begin() as conn:
        conn.execute(samples.insert(), rows)


def test_lost_counts_acknowledged_seqs_missing_from_the_database(engine: Engine) -> None:
    store(engine, "a", [1, 2, 3, 4, 5])
    store(engine, "b", [1, 2, 4, 5])  # 3 is missing; 5 was stored but its answer never came back (not acknowledged)
    acknowledged = {"a": 5, "b": 4, "c": 0}
    assert lost_by_seq(engine, acknowledged) == (9, 1)


@pytest.mark.postgres
@pytest.mark.slow
def test_a_short_soak_against_a_real_server_loses_nothing() -> None:
    admin = create_engine(POSTGRES_ADMIN_URL)
    try:
        with admin.connect() as conn:
            conn.execute(text("SELECT 1"))
    except OperationalError as exc:
        unavailable(f"PostgreSQL not reachable at {POSTGRES_ADMIN_URL}: {exc.orig}")
    finally:
        admin.dispose()
    summary = run(SoakConfig(nodes=5, gpus=1, push_interval_s=1.0, duration_s=4.0))
    assert summary["samples_lost"] == 0 and summary["errors"] == 0
    assert summary["samples_sent"] == summary["samples_stored"] > 0
    assert summary["samples_offered"] == summary["samples_sent"] + summary["samples_backlog_end"]
    assert summary["server_rss_mb_start"] is not None and summary["p99_ms"] is not None

"""The read-only queries the dashboard added to the collector: node filters, rollups per series and per node,
window statistics and a pool's replicas over time — on SQLite and PostgreSQL."""

from __future__ import annotations

from sqlalchemy import Engine, insert

from collector.registry import NodeStatus, list_nodes, reported_pools
from collector.series import pool_replica_history, recent_node_rollups, series_rollups, window_stats
from collector.tables import nodes, replica_reports, rollups_1m, series_latest
from tests.support.rollups import rollup_row


def _node(conn, node_id: str, last_seen: float) -> None:  # type: ignore[no-untyped-def]
    conn.execute(insert(nodes).values(id=node_id, first_seen=0.0, last_seen=last_seen))


def test_nodes_filtered_by_status_and_pool(engine: Engine) -> None:
    with engine.begin() as conn:
        _node(conn, "a", 99.0)
        _node(conn, "b", 10.0)
        _node(conn, "c", 99.5)
        conn.execute(insert(series_latest).values(node_id="a", device=-1, pool="chat", ts=99.0))
        conn.execute(insert(series_latest).values(node_id="b", device=-1, pool="chat", ts=10.0))
        conn.execute(insert(series_latest).values(node_id="c", device=0, pool="", ts=99.5))
    with engine.connect() as conn:

        def ids(**kw: object) -> list[str]:
            return [v.id for v in list_nodes(conn, now=100.0, down_after_seconds=3.0, **kw)]  # type: ignore[arg-type]

        assert ids() == ["a", "b", "c"]
        assert ids(status=NodeStatus.UP) == ["a", "c"]
        assert ids(status=NodeStatus.DOWN) == ["b"]
        assert ids(pool="chat") == ["a", "b"]
        assert ids(pool="chat", status=NodeStatus.UP, after=None, limit=1) == ["a"]
        assert reported_pools(conn) == ["chat"]


def test_rollups_per_series_and_combined_per_node(engine: Engine) -> None:
    rows = [
        rollup_row("a", 0, "", 60.0, gpu_power_watts=100.0, gpu_utilization_ratio=0.2),
        rollup_row("a", 1, "", 60.0, gpu_power_watts=150.0, gpu_utilization_ratio=0.6),
        rollup_row("a", 0, "", 120.0, gpu_power_watts=110.0),
        rollup_row("b", 0, "", 60.0, gpu_power_watts=999.0),
    ]
    with engine.begin() as conn:
        conn.execute(insert(rollups_1m), rows)
    with engine.connect() as conn:
        per_series = series_rollups(conn, ["a"], 0.0, 200.0)
        per_node = recent_node_rollups(conn, ["a"], 0.0, 200.0)
        assert series_rollups(conn, [], 0.0, 1.0) == {}
    assert per_series[("a", 0, "")]["gpu_power_watts"] == [(60.0, 100.0), (120.0, 110.0)]
    assert set(per_series) == {("a", 0, ""), ("a", 1, "")}
    assert per_node["a"]["gpu_power_watts"] == [(60.0, 250.0), (120.0, 110.0)]  # power adds up over GPUs
    assert per_node["a"]["gpu_utilization_ratio"] == [(60.0, 0.6)]  # utilization takes the max


def test_window_stats_aggregate_each_series_in_the_database(engine: Engine) -> None:
    rows = [rollup_row("a", 0, "", float(b), gpu_utilization_ratio=v) for b, v in ((0, 0.2), (60, 0.4), (120, 0.9))]
    with engine.begin() as conn:
        conn.execute(insert(rollups_1m), rows)
    with engine.connect() as conn:
        (found,) = window_stats(conn, 0.0, 120.0)  # [0, 120): the third bucket is out
    assert (found.node_id, found.device, found.pool) == ("a", 0, None)
    assert abs(found.mean["gpu_utilization_ratio"] - 0.3) < 1e-9 and found.peak["gpu_utilization_ratio"] == 0.4
    assert "gpu_power_watts" not in found.mean  # not measured stays absent


def test_pool_replicas_over_time_sum_each_nodes_last_report_per_bucket(engine: Engine) -> None:
    def report(node: str, ts: float, ready: int, starting: int = 0) -> dict[str, object]:
        return {"node_id": node, "pool": "chat", "ts": ts, "ready": ready, "starting": starting, "draining": 0}

    with engine.begin() as conn:
        conn.execute(
            insert(replica_reports),
            [
                report("a", 0.5, 1),
                report("a", 9.0, 1, 1),
                report("b", 3.0, 2),
                report("a", 12.0, 2),
                report("b", 25.0, 2),
            ],
        )
    with engine.connect() as conn:
        history = pool_replica_history(conn, "chat", 0.0, 30.0, 10.0)
    assert history == [(0.0, 3, 1), (10.0, 2, 0), (20.0, 2, 0)]

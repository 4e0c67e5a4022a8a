"""The fleet page's pure parts: which nodes a firing alert marks and how red, why a value is missing, each pool's
summary and the tiles split per pool."""

from __future__ import annotations

import pytest

from alerting.lifecycle import Alert, AlertStatus
from collector.registry import Gpu, LatestSeries, NodeStatus, NodeView, PoolOnNode
from fleet.pools import DemandMetric, Pool, PoolSpec
from web.dashboard.absence import NO_GPU, NO_POOL, NOT_YET, why_absent
from web.dashboard.pool_groups import group_by_pool, pool_summary
from web.dashboard.tiles import Heat, alert_marks
from wire.control import MetricAbsences

NODE_POOLS = {"a": ["chat"], "b": ["chat", "vision"], "c": []}


def _firing(name: str, severity: str, **labels: str) -> Alert:
    return Alert(1, name, {"alertname": name, "severity": severity, **labels}, {}, AlertStatus.FIRING, 1.0, 0.0, 0.0)


@pytest.mark.parametrize(
    ("alerts", "marked"),
    [
        pytest.param([_firing("GpuHot", "critical", node="a")], {"a": ("critical", ("GpuHot",))}, id="node-label"),
        pytest.param(
            [_firing("PoolSlow", "warning", pool="chat")],
            {"a": ("warning", ("PoolSlow",)), "b": ("warning", ("PoolSlow",))},
            id="pool-label-marks-every-node-serving-it",
        ),
        pytest.param(
            [_firing("QueueDeep", "info", node="b", pool="chat")], {"b": ("info", ("QueueDeep",))}, id="node-and-pool"
        ),
        pytest.param(
            [_firing("PoolSlow", "warning", pool="vision"), _firing("GpuHot", "critical", node="b")],
            {"b": ("critical", ("GpuHot", "PoolSlow"))},
            id="worst-first",
        ),
        pytest.param([_firing("FleetQuiet", "critical")], {}, id="fleet-wide-marks-no-tile"),
        pytest.param([_firing("GpuHot", "critical", node="elsewhere")], {}, id="a-node-not-shown"),
    ],
)
def test_a_firing_alert_marks_the_nodes_it_concerns(
    alerts: list[Alert], marked: dict[str, tuple[str, tuple[str, ...]]]
) -> None:
    found = alert_marks(alerts, NODE_POOLS)
    assert {node: (m.severity, m.names) for node, m in found.items()} == marked


def test_a_mark_never_leaves_a_tile_green_and_counts_its_alerts() -> None:
    marks = alert_marks([_firing("X", "critical", node="a"), _firing("Y", "info", node="c")], NODE_POOLS)
    assert (marks["a"].heat, marks["c"].heat) == (Heat.CRITICAL, Heat.WARN)
    assert marks["a"].text == "1 firing: X"


def _view(*series: LatestSeries, gpus: int = 0, source: str = "agent") -> NodeView:
    inventory = [Gpu(i, "H100", None, 80 << 30, None) for i in range(gpus)]
    return NodeView("n", NodeStatus.UP, None, None, 0.0, 1.0, 1.0, inventory, list(series), source=source)


HOST = LatestSeries("n", None, None, 1.0, {"network_latency_seconds": 0.01}, None)
CHAT = LatestSeries("n", None, "chat", 1.0, {"request_rate_per_second": 3.0}, None)
CODE = LatestSeries("n", None, "code", 1.0, {"request_rate_per_second": 1.0}, None)
NO_NVML = MetricAbsences(gpu="NVML Shared Library Not Found")
TGI = MetricAbsences(pools={"chat": {"kv_cache_utilization_ratio": "tgi exposes no KV-cache metric"}})


@pytest.mark.parametrize(
    ("metric", "view", "absent", "why"),
    [
        pytest.param("gpu_power_watts", _view(HOST), NO_NVML, "no GPU (NVML Shared Library Not Found)", id="no-nvml"),
        pytest.param("gpu_power_watts", _view(HOST), None, NO_GPU, id="no-gpu-older-agent"),
        pytest.param("gpu_power_watts", _view(HOST, gpus=1), NO_NVML, NOT_YET, id="gpu-registered"),
        pytest.param("kv_cache_utilization_ratio", _view(CHAT), TGI, "tgi exposes no KV-cache metric", id="engine"),
        pytest.param(
            "kv_cache_utilization_ratio",
            _view(CHAT, CODE),
            MetricAbsences(pools={**TGI.pools, "code": {"kv_cache_utilization_ratio": "llamacpp: not exposed"}}),
            "chat: tgi exposes no KV-cache metric; code: llamacpp: not exposed",
            id="two-pools",
        ),
        pytest.param("queue_depth_requests", _view(HOST), TGI, NO_POOL, id="no-pool"),
        pytest.param("queue_depth_requests", _view(CHAT), TGI, NOT_YET, id="not-yet"),
        pytest.param(
            "queue_depth_requests",
            _view(CHAT, source="remote_write"),
            None,
            "not sent by Prometheus remote write",
            id="remote-write",
        ),
    ],
)
def test_a_missing_value_says_why(metric: str, view: NodeView, absent: MetricAbsences | None, why: str) -> None:
    assert why_absent(metric, view, absent) == why


def _on(node: str, pool: str, ready: int, **metrics: float) -> PoolOnNode:
    return PoolOnNode(node, pool, ready, 1, 1.0, metrics)


def test_a_pools_summary_sums_demand_takes_the_worst_p99_and_judges_it_against_the_slo() -> None:
    pool = Pool("chat", PoolSpec(min_replicas=1, max_replicas=8, slo_p99_seconds=0.5), None, 1, 0.0, 0.0)
    on = [
        _on("a", "chat", 2, request_rate_per_second=30.0, request_latency_p99_seconds=0.45),
        _on("b", "chat", 1, request_rate_per_second=11.5, request_latency_p99_seconds=0.1),
    ]
    summary = pool_summary(on, pool)
    assert (summary.nodes, summary.ready, summary.starting) == (2, 3, 2)
    assert (summary.p99, summary.slo, summary.p99_heat, summary.demand) == ("450 ms", "500 ms", "warn", "41.5 /s")
    unconfigured = pool_summary([_on("a", "x", 1)], None)
    assert (unconfigured.p99, unconfigured.slo, unconfigured.p99_heat, unconfigured.demand) == (
        "—",
        None,
        "unknown",
        "—",
    )
    assert unconfigured.demand_metric == DemandMetric.REQUESTS.value


def test_tiles_split_per_pool_a_node_of_two_in_both_and_the_poolless_last() -> None:
    tiles = [("chat", "A"), ("chat", "B@chat"), ("vision", "B@vision"), (None, "C")]
    groups = group_by_pool(tiles, {})
    assert [(g.pool, g.tiles) for g in groups] == [
        ("chat", ("A", "B@chat")),
        ("vision", ("B@vision",)),
        (None, ("C",)),
    ]
    only = group_by_pool([("vision", "B@vision")], {}, only="vision")
    assert [(g.pool, g.tiles) for g in only] == [("vision", ("B@vision",))]
    assert group_by_pool([], {}, only="vision") == []

"""Node registry and liveness: registered on first ingest, down after 3 s without samples, up when they return."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from fastapi.testclient import TestClient

from collector.registry import LatestSeries, NodeStatus, combine_latest, node_status
from tests.conftest import gpu_sample, pool_sample
from tests.support.clock import FakeClock

Auth = Callable[..., dict[str, str]]


@pytest.mark.parametrize(
    ("age", "expected"),
    [(0.0, NodeStatus.UP), (2.999, NodeStatus.UP), (3.0, NodeStatus.DOWN), (60.0, NodeStatus.DOWN)],
)
def test_status_by_age_of_last_samples(age: float, expected: NodeStatus) -> None:
    assert node_status(100.0, now=100.0 + age, down_after_seconds=3.0) is expected


def test_latest_values_combine_as_the_catalog_says() -> None:
    series = [
        LatestSeries("n", 0, None, 1.0, {"gpu_utilization_ratio": 0.9, "gpu_memory_used_bytes": 10.0}, None),
        LatestSeries("n", 1, None, 1.0, {"gpu_utilization_ratio": 0.2, "gpu_memory_used_bytes": 5.0}, None),
    ]
    # utilization takes the busiest GPU; memory adds up
    assert combine_latest(series) == {"gpu_utilization_ratio": 0.9, "gpu_memory_used_bytes": 15.0}


def _push(client: TestClient, headers: dict[str, str], node: str, seq: int, ts: float, **extra: Any) -> None:
    body = {"node_id": node, "samples": [gpu_sample(seq, ts)], **extra}
    assert client.post("/api/v1/ingest", json=body, headers=headers).status_code == 200


def test_node_registers_with_its_gpus_and_fails_over_within_three_seconds(
    client: TestClient, auth: Auth, clock: FakeClock
) -> None:
    agent, viewer = auth("agent", "node-a"), auth("viewer")
    inventory = {
        "hostname": "gpu-host-1",
        "agent_version": "0.1.0",
        "gpus": [
            {
                "index": 0,
                "name": "NVIDIA H200",
                "uuid": "GPU-0a",
                "memory_total_bytes": 150_000_000_000,
                "driver_version": "575.57",
            },
        ],
    }
    _push(client, agent, "node-a", 1, clock(), inventory=inventory)
    node = client.get("/api/v1/nodes/node-a", headers=viewer).json()
    assert node["status"] == "up"
    assert node["hostname"] == "gpu-host-1"
    assert node["gpus"] == [inventory["gpus"][0]]

    clock.advance(2.9)
    assert client.get("/api/v1/nodes/node-a", headers=viewer).json()["status"] == "up"
    clock.advance(0.2)
    assert client.get("/api/v1/nodes/node-a", headers=viewer).json()["status"] == "down"
    _push(client, agent, "node-a", 2, clock())
    assert client.get("/api/v1/nodes/node-a", headers=viewer).json()["status"] == "up"


def test_liveness_follows_the_server_clock_not_the_node_clock(client: TestClient, auth: Auth, clock: FakeClock) -> None:
    # A node whose clock is 5 minutes behind still counts as up while it pushes.
    _push(client, auth("agent", "node-a"), "node-a", 1, clock() - 300)
    assert client.get("/api/v1/nodes/node-a", headers=auth("viewer")).json()["status"] == "up"


def test_nodes_list_pages_with_a_cursor_and_shows_latest_values(
    client: TestClient, auth: Auth, clock: FakeClock
) -> None:
    for n in range(5):
        _push(client, auth("agent", f"node-{n}"), f"node-{n}", 1, clock())
    agent = auth("agent", "node-0")
    body = {
        "node_id": "node-0",
        "samples": [
            gpu_sample(2, clock() + 0.5, gpu_utilization_ratio=0.75),
            pool_sample(3, clock() + 0.5, request_rate_per_second=12.5),
        ],
    }
    client.post("/api/v1/ingest", json=body, headers=agent)
    viewer = auth("viewer")
    first = client.get("/api/v1/nodes", params={"limit": 2}, headers=viewer).json()
    assert [n["id"] for n in first["items"]] == ["node-0", "node-1"]
    assert first["next"] == "node-1"
    rest = client.get("/api/v1/nodes", params={"limit": 10, "cursor": first["next"]}, headers=viewer).json()
    assert [n["id"] for n in rest["items"]] == ["node-2", "node-3", "node-4"]
    assert rest["next"] is None
    node0 = first["items"][0]
    assert node0["latest"]["gpu_utilization_ratio"] == 0.75
    assert node0["latest"]["request_rate_per_second"] == 12.5
    assert "gpu_power_watts" not in node0["latest"]  # never measured: absent


def test_older_replayed_samples_do_not_overwrite_the_latest_value(
    client: TestClient, auth: Auth, clock: FakeClock
) -> None:
    agent = auth("agent", "node-a")
    client.post(
        "/api/v1/ingest",
        json={"node_id": "node-a", "samples": [gpu_sample(10, clock(), gpu_utilization_ratio=0.9)]},
        headers=agent,
    )
    client.post(
        "/api/v1/ingest",
        json={"node_id": "node-a", "samples": [gpu_sample(5, clock() - 60, gpu_utilization_ratio=0.1)]},
        headers=agent,
    )
    node = client.get("/api/v1/nodes/node-a", headers=auth("viewer")).json()
    assert node["latest"]["gpu_utilization_ratio"] == 0.9


def test_unknown_node_is_404(client: TestClient, auth: Auth) -> None:
    assert client.get("/api/v1/nodes/ghost", headers=auth("viewer")).status_code == 404


def test_reading_nodes_needs_a_token(client: TestClient, auth: Auth) -> None:
    assert client.get("/api/v1/nodes").status_code == 401
    assert client.get("/api/v1/nodes", headers=auth("agent", "node-a")).status_code == 403

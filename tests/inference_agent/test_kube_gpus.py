"""GPUs attributed to pods: the kubelet's pod-resources API (a fake gRPC server built from the upstream proto, on a
unix socket) says which pod holds which GPU UUID, NVML's inventory which index has it; per-GPU rows then carry the
pod's pool and ``extra.pod``, and a real collector stores them as its API returns them."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import Engine

from collector.registry import LatestSeries, combine_latest, pools_on_nodes
from inference_agent.kube.api_client import KubeApi, TokenFile
from inference_agent.kube.discovery import discover_pods
from inference_agent.kube.gpu_attribution import AttributedGpuProbe, GpuUser, attribute
from inference_agent.kube.pod_resources import PodResourcesClient, PodResourcesUnavailable
from inference_agent.kube.pod_scope import PodScope
from inference_agent.probes.base import GpuInfo, GpuProbe
from inference_agent.probes.fake_nvml import FakeGpu, FakeNvml
from inference_agent.probes.nvml import NvmlProbe
from inference_agent.sampler import wire_sample
from tests.support.clock import FakeClock
from tests.support.fake_kube import FakeKube
from tests.support.fake_podresources import FakePodDevices, FakePodResources
from tests.support.waiting import wait_for

UUIDS = ("GPU-0a0a0a0a-0000-4000-8000-000000000000", "GPU-1b1b1b1b-0000-4000-8000-000000000001")
INVENTORY = [GpuInfo(0, uuid=UUIDS[0]), GpuInfo(1, uuid=UUIDS[1]), GpuInfo(2, uuid=None)]


@pytest.mark.parametrize(
    ("device_pods", "pools", "expected"),
    [
        ({UUIDS[0]: ["ml/chat-0"]}, {"ml/chat-0": "chat"}, {0: GpuUser("ml/chat-0", "chat")}),
        ({UUIDS[1]: ["gpu-test/burn"]}, {}, {1: GpuUser("gpu-test/burn", None)}),  # not a fleetpilot pod: no pool
        # two time-sliced replicas of one GPU held by two pods of one pool, and of two pools
        (
            {f"{UUIDS[0]}::0": ["ml/a"], f"{UUIDS[0]}::1": ["ml/b"]},
            {"ml/a": "chat", "ml/b": "chat"},
            {0: GpuUser("ml/a,ml/b", "chat")},
        ),
        ({UUIDS[0]: ["ml/a", "ml/b"]}, {"ml/a": "chat", "ml/b": "code"}, {0: GpuUser("ml/a,ml/b", None)}),
        # a MIG device's UUID is no NVML index's: left unattributed rather than put on the wrong GPU
        ({"MIG-9c9c9c9c-0000-4000-8000-000000000009": ["ml/a"]}, {"ml/a": "chat"}, {}),
    ],
)
def test_device_ids_map_to_gpu_indexes_through_their_uuids(
    device_pods: dict[str, list[str]], pools: dict[str, str], expected: dict[int, GpuUser]
) -> None:
    assert attribute(device_pods, INVENTORY, pools) == expected


@pytest.fixture
def socket_path() -> Iterator[Path]:
    # a unix socket's path is bounded (108 bytes): pytest's tmp_path can be longer
    import tempfile

    with tempfile.TemporaryDirectory(prefix="kubelet-") as folder:
        yield Path(folder) / "kubelet.sock"


@pytest.fixture
def kubelet(socket_path: Path) -> Iterator[FakePodResources]:
    with FakePodResources(socket_path) as fake:
        yield fake


def two_gpus() -> NvmlProbe:
    return NvmlProbe.open(FakeNvml([FakeGpu(uuid=UUIDS[0]), FakeGpu(uuid=UUIDS[1])]))


def test_the_client_lists_the_gpus_each_pod_holds(kubelet: FakePodResources, socket_path: Path) -> None:
    kubelet.pods = [
        FakePodDevices("ml", "chat-0", (UUIDS[1],)),
        FakePodDevices("ml", "chat-0", ("0000:3b:00.0",), resource="example.com/nic"),
        FakePodDevices("ml", "train", (UUIDS[0], UUIDS[1])),
    ]
    client = PodResourcesClient(socket_path)
    try:
        assert client.device_pods() == {UUIDS[1]: ["ml/chat-0", "ml/train"], UUIDS[0]: ["ml/train"]}
    finally:
        client.close()


def rows(probe: GpuProbe) -> dict[int, tuple[str | None, Any]]:
    return {r.device: (r.pool, r.extra.get("pod")) for r in probe.read() if r.device is not None}


def test_gpu_rows_carry_the_pool_and_pod_using_them(kubelet: FakePodResources, socket_path: Path) -> None:
    kubelet.pods = [FakePodDevices("ml", "chat-0", (UUIDS[1],))]
    probe = AttributedGpuProbe(two_gpus(), PodResourcesClient(socket_path), lambda: {"ml/chat-0": "chat"})
    try:
        wait_for(lambda: rows(probe)[1] == ("chat", "ml/chat-0"))
        assert rows(probe)[0] == (None, None)  # no pod holds GPU 0: no pool, no pod, never a guess
        kubelet.pods = []
        probe.refresh()  # a pod went: asked again at once, not in 10 s
        wait_for(lambda: rows(probe)[1] == (None, None))
    finally:
        probe.close()


def test_without_the_kubelet_socket_gpu_rows_carry_no_attribution(
    socket_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    client = PodResourcesClient(socket_path)
    with pytest.raises(PodResourcesUnavailable, match="no kubelet pod-resources socket at"):
        client.device_pods()
    probe = AttributedGpuProbe(two_gpus(), client, dict, refresh_s=0.05)
    try:
        time.sleep(0.3)  # several refreshes
        assert rows(probe) == {0: (None, None), 1: (None, None)}
        assert all(r.metrics["gpu_utilization_ratio"] >= 0 for r in probe.read())  # the GPU rows themselves stay
    finally:
        probe.close()
    assert [r.getMessage() for r in caplog.records if "pod-resources" in r.getMessage()] == [
        f"no kubelet pod-resources socket at {socket_path}: GPU rows carry no pod or pool until it answers"
    ]


def test_pod_discovery_rows_are_stored_with_their_pool_and_pod(
    kubelet: FakePodResources,
    socket_path: Path,
    tmp_path: Path,
    client: TestClient,
    auth: Callable[..., dict[str, str]],
    clock: FakeClock,
    engine: Engine,
) -> None:
    """Pods found on the fake API server, GPUs attributed by the fake kubelet, rows ingested by a real collector."""
    kubelet.pods = [FakePodDevices("ml", "chat-0", (UUIDS[0],))]
    token = tmp_path / "token"
    with FakeKube() as kube:
        token.write_text(kube.token)
        # the pod's engine endpoint answers nothing here: its pool row says so, the GPU row is what is looked at
        annotations = {"fleetpilot.io/pool": "chat", "fleetpilot.io/engine": "vllm", "fleetpilot.io/metrics-port": "9"}
        kube.add_pod("ml", "chat-0", "node-a", annotations=annotations)
        found, gpu = discover_pods(
            KubeApi(kube.url, TokenFile(token)),
            "node-a",
            two_gpus(),
            scope=PodScope(namespaces=frozenset({"ml"})),
            pod_resources_socket=socket_path,
            scrape_interval_s=0.05,
        )
        assert gpu is not None
        try:
            wait_for(lambda: rows(gpu)[0] == ("chat", "ml/chat-0"))
            readings = gpu.read() + wait_for(found.read)
        finally:
            found.close()
            gpu.close()
    samples = [{"seq": seq, **wire_sample(r, clock())} for seq, r in enumerate(readings, start=1)]
    answer = client.post(
        "/api/v1/ingest", json={"node_id": "node-a", "samples": samples}, headers=auth("agent", "node-a")
    )
    assert answer.status_code == 200, answer.text
    node = client.get("/api/v1/nodes/node-a", headers=auth("viewer")).json()
    stored = {(s["device"], s["pool"]): s for s in node["series"]}
    assert stored[(0, "chat")]["extra"]["pod"] == "ml/chat-0"
    assert stored[(0, "chat")]["metrics"]["gpu_utilization_ratio"] >= 0
    assert (1, None) in stored and "pod" not in (stored[(1, None)]["extra"] or {})
    assert stored[(None, "chat")]["extra"]["pod"] == "ml/chat-0"  # the pod's own (failed) scrape, its pool row
    with engine.connect() as conn:
        [pool] = pools_on_nodes(conn, ["node-a"], down_after_seconds=3.0)
    assert (pool.pool, pool.metrics) == ("chat", {})  # the replica's series, not the GPU row that names its pool


def test_a_gpu_that_changed_series_with_its_pod_counts_once_in_the_nodes_latest() -> None:
    before = LatestSeries("node-a", 0, None, 10.0, {"gpu_memory_used_bytes": 4e9, "gpu_utilization_ratio": 0.9}, None)
    used = LatestSeries("node-a", 0, "chat", 20.0, {"gpu_memory_used_bytes": 6e9, "gpu_utilization_ratio": 0.3}, None)
    other = LatestSeries("node-a", 1, None, 20.0, {"gpu_memory_used_bytes": 1e9}, None)
    replica = LatestSeries("node-a", None, "chat", 20.0, {"request_rate_per_second": 5.0}, None)
    # GPU 0's newest row (the pod's) and GPU 1's: 6 + 1 GB, not 4 + 6 + 1; its old 0.9 no longer the node's max
    assert combine_latest([before, used, other, replica]) == {
        "gpu_memory_used_bytes": 7e9,
        "gpu_utilization_ratio": 0.3,
        "request_rate_per_second": 5.0,
    }

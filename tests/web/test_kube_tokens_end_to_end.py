"""A real server process with ``kubernetes_agent_auth``, its kubeconfig naming the fake API server, and an agent's
pusher reading a projected token file that the "kubelet" rotates: each token is reviewed once, the rotated one is
sent at the next push, and a token of another pod's node is refused."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from prometheus_client import CollectorRegistry

from fleetpilot.launch import ServerProcess
from inference_agent.agent_token import AgentToken
from inference_agent.pusher import Pusher, PushOutcome
from inference_agent.rejected_batches import RejectedBatches
from inference_agent.spool import Spool
from inference_agent.telemetry import AgentTelemetry
from tests.support.fake_kube import FakeKube
from tests.support.fake_kube.tokenreview import issue_token

pytestmark = pytest.mark.slow


@pytest.fixture
def kube() -> Iterator[FakeKube]:
    with FakeKube() as kube:
        kube.add_pod("fleetpilot", "agent-a", "node-a", service_account="fleetpilot-agent")
        yield kube


@pytest.fixture
def server(kube: FakeKube, tmp_path: Path) -> Iterator[ServerProcess]:
    kubeconfig = kube.write_kubeconfig(tmp_path / "kubeconfig")
    env = {
        "KUBECONFIG": str(kubeconfig),
        "FLEETPILOT_KUBERNETES_AGENT_AUTH": "true",
        "FLEETPILOT_KUBERNETES_AGENT_SERVICE_ACCOUNTS": '["fleetpilot/fleetpilot-agent"]',
    }
    with ServerProcess(f"sqlite:///{tmp_path}/fleetpilot.db", env=env, cwd=tmp_path) as server:
        yield server


def swap(path: Path, token: str) -> None:
    """The kubelet's atomic rewrite of a projected token file."""
    fresh = path.with_name(path.name + ".new")
    fresh.write_text(token)
    os.replace(fresh, path)


def test_an_agent_with_a_rotating_projected_token_ingests_for_its_node(
    kube: FakeKube, server: ServerProcess, tmp_path: Path
) -> None:
    path = tmp_path / "token"
    path.write_text(issue_token(kube, "fleetpilot", "fleetpilot-agent", "agent-a", "node-a"))
    spool = Spool(tmp_path / "spool")
    with httpx.Client(base_url=server.url, timeout=10.0) as client:
        pusher = Pusher(
            spool,
            client,
            AgentTelemetry(CollectorRegistry()),
            node_id="node-a",
            token=AgentToken(path.read_text(), path),
            inventory=None,
            rejected=RejectedBatches(tmp_path / "rejected", max_bytes=1 << 20, max_files=100),
        )
        for ts in (1.0, 2.0):
            spool.append([{"ts": ts, "device": 0, "pool": None, "metrics": {"gpu_utilization_ratio": 0.4}}])
            assert pusher.push_once().outcome is PushOutcome.PUSHED
        assert len(kube.sent("POST")) == 1, "the second push was answered from the verdict cache"
        rotated = issue_token(kube, "fleetpilot", "fleetpilot-agent", "agent-a", "node-a")
        swap(path, rotated)
        spool.append([{"ts": 3.0, "device": 0, "pool": None, "metrics": {"gpu_utilization_ratio": 0.4}}])
        assert pusher.push_once().outcome is PushOutcome.PUSHED
        sent = [json.loads(r.body)["spec"]["token"] for r in kube.sent("POST")]
        assert sent[-1] == rotated
        other = issue_token(kube, "fleetpilot", "fleetpilot-agent", "agent-b", "node-b")
        refused = client.post(
            "/api/v1/ingest",
            json={"node_id": "node-a", "samples": []},
            headers={"Authorization": f"Bearer {other}"},
        )
    assert refused.status_code == 403
    assert "is not this token's node ('node-b')" in refused.json()["error"]["message"]

"""The agent's own endpoint: its health and why GPU metrics are absent, in /metrics and /healthz."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from inference_agent.daemon import Agent, Probes, open_probes
from inference_agent.fake_collector import FakeCollector
from inference_agent.settings import AgentSettings, WorkloadSpec


@pytest.fixture
def agent(tmp_path: Path) -> Iterator[Agent]:
    settings = AgentSettings(
        collector="http://collector",
        token="agent-token",
        node_id="node-a",
        gpu_probe="none",
        spool_dir=tmp_path,
        metrics_port=0,
    )
    agent = Agent(settings, Probes(None, "no NVIDIA driver on this machine"), transport=FakeCollector().transport)
    agent.endpoint.start()
    yield agent
    agent.close()


def test_metrics_say_why_gpu_metrics_are_absent(agent: Agent) -> None:
    agent.sampler.sample_once()
    text = httpx.get(f"http://127.0.0.1:{agent.endpoint.port}/metrics").text
    assert "fleetpilot_agent_gpu_probe_up 0.0" in text
    assert 'fleetpilot_agent_gpu_probe_info{probe="none",reason="no NVIDIA driver on this machine"} 1.0' in text
    assert "fleetpilot_agent_spool_pending_samples" in text


def test_healthz_reports_the_spool(agent: Agent) -> None:
    answer = httpx.get(f"http://127.0.0.1:{agent.endpoint.port}/healthz")
    assert answer.status_code == 200
    assert answer.json()["gpu_absent_reason"] == "no NVIDIA driver on this machine"
    assert httpx.get(f"http://127.0.0.1:{agent.endpoint.port}/nope").status_code == 404


def test_healthz_is_503_with_the_reason_once_the_pusher_stopped(agent: Agent) -> None:
    stopped = threading.Event()
    stopped.set()
    agent.pusher.run(stopped, interval_s=1.0)  # its loop ends at once, as a thread that died would
    answer = httpx.get(f"http://127.0.0.1:{agent.endpoint.port}/healthz")
    assert answer.status_code == 503
    assert answer.json()["status"] == "degraded"
    assert "the pusher has stopped" in answer.json()["reason"]
    assert "fleetpilot_agent_pusher_up 0.0" in httpx.get(f"http://127.0.0.1:{agent.endpoint.port}/metrics").text


def test_the_pusher_is_up_until_then(agent: Agent) -> None:
    assert "fleetpilot_agent_pusher_up 1.0" in httpx.get(f"http://127.0.0.1:{agent.endpoint.port}/metrics").text


def test_a_desired_state_past_max_replicas_is_refused_once_and_counted(agent: Agent) -> None:
    agent._on_desired({"pools": {"a": {"replicas": 1}}})
    huge = {"pools": {f"p{i}": {"replicas": 64} for i in range(1000)}}
    for _ in range(3):  # one answer a second carries it: one line, one count
        agent._on_desired(huge)
    assert agent.desired == {"pools": {"a": {"replicas": 1}}}
    text = httpx.get(f"http://127.0.0.1:{agent.endpoint.port}/metrics").text
    assert 'fleetpilot_agent_desired_refused_total{reason="TooManyPools"} 1.0' in text


def test_without_a_gpu_auto_leaves_gpu_metrics_absent_with_the_reason(tmp_path: Path) -> None:
    settings = AgentSettings(collector="http://c", token="agent-token", gpu_probe="auto", spool_dir=tmp_path)
    probes = open_probes(settings)
    try:
        if probes.gpu is not None:
            pytest.skip("this machine has a GPU: NVML opened")
        assert probes.gpu_absent_reason
        assert [p.name for p in probes.others] == ["host"]
    finally:
        probes.close()


@pytest.mark.parametrize(
    ("text", "spec"),
    [
        ("none", WorkloadSpec("none")),
        ("vllm=http://127.0.0.1:8000/metrics", WorkloadSpec("vllm", "http://127.0.0.1:8000/metrics")),
        ("triton=https://t:8002/metrics", WorkloadSpec("triton", "https://t:8002/metrics")),
    ],
)
def test_workload_flag(text: str, spec: WorkloadSpec) -> None:
    assert WorkloadSpec.parse(text) == spec


@pytest.mark.parametrize("text", ["vllm", "vllm=localhost:8000", "sglang=http://x/metrics", "built-in"])
def test_bad_workload_flag_says_what_is_accepted(text: str) -> None:
    with pytest.raises(ValueError, match="vllm=URL"):
        WorkloadSpec.parse(text)

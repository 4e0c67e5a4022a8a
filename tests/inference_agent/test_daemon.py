"""The agent's own endpoint (its health, why GPU metrics are absent), and how it takes the desired state of each
ingest answer: typed, a newer server's fields ignored, a malformed one refused with the last good one kept."""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from inference_agent.config import AgentConfig
from inference_agent.daemon import Agent, Probes, open_probes
from inference_agent.fake_collector import FakeCollector
from inference_agent.pusher import PushOutcome
from inference_agent.settings import AgentSettings, WorkloadSpec
from wire.control import DesiredState


@pytest.fixture
def collector() -> FakeCollector:
    return FakeCollector()


def node_settings(tmp_path: Path, **overrides: Any) -> AgentSettings:
    """node-a's agent pushing to the fake collector, without a GPU probe, its endpoint on any free port."""
    fields = {"gpu_probe": "none", "spool_dir": tmp_path, "metrics_port": 0, **overrides}
    return AgentSettings(collector="http://collector", token="agent-token", node_id="node-a", **fields)


@pytest.fixture
def agent(tmp_path: Path, collector: FakeCollector) -> Iterator[Agent]:
    settings = node_settings(tmp_path)
    agent = Agent(settings, Probes(None, "no NVIDIA driver on this machine"), transport=collector.transport)
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


def refused(agent: Agent, reason: str) -> float | None:
    return agent.registry.get_sample_value("fleetpilot_agent_desired_refused_total", {"reason": reason})


def push(agent: Agent, collector: FakeCollector, desired: dict[str, Any] | None) -> None:
    collector.desired = desired
    agent.spool.append([{"ts": 1000.0, "device": None, "pool": None, "metrics": {"host_cpu_ratio": 0.1}, "extra": {}}])
    assert agent.pusher.push_once().outcome is PushOutcome.PUSHED


def test_a_desired_state_past_max_replicas_is_refused_once_and_counted(agent: Agent) -> None:
    good = DesiredState.model_validate({"pools": {"a": {"replicas": 1}}})
    agent._on_desired(good)
    huge = DesiredState.model_validate({"pools": {"a": {"replicas": 40}, "b": {"replicas": 40}}})  # 80 > 64
    for _ in range(3):  # one answer a second carries it: one line, one count
        agent._on_desired(huge)
    assert agent.desired == good
    assert refused(agent, "TooManyReplicas") == 1


def test_the_desired_state_is_read_typed_and_a_newer_servers_fields_are_ignored(
    agent: Agent, collector: FakeCollector
) -> None:
    newer = {
        "pools": {"a": {"replicas": 2, "placement_hint": "rack-3"}},
        "tenants": {"acme": {"slo_class": "batch", "quotas": {"a": {"rate_rps": 5.0, "gpu_seconds_per_hour": 9}}}},
        "rollout": {"wave": 2},  # a top-level field this agent does not know
    }
    push(agent, collector, newer)
    assert agent.desired == DesiredState.model_validate(
        {"pools": {"a": {"replicas": 2}}, "tenants": {"acme": {"slo_class": "batch", "quotas": {"a": {"rate_rps": 5}}}}}
    )
    assert refused(agent, "Malformed") == 0


@pytest.mark.parametrize(
    ("bad", "field"),
    [
        ({"pools": {"a": {"replicas": -1}}}, "pools.a.replicas"),
        ({"tenants": {"acme": {"slo_class": "gold"}}}, "tenants.acme.slo_class"),
        ({"pool_limits": {"a": {"cpu_share": 2}}}, "pool_limits.a.cpu_share"),
    ],
)
def test_a_malformed_desired_state_is_logged_counted_and_the_last_good_one_kept(
    agent: Agent, collector: FakeCollector, caplog: pytest.LogCaptureFixture, bad: dict[str, Any], field: str
) -> None:
    good = {"pools": {"a": {"replicas": 1}}, "pool_limits": {"a": {"cpu_share": 0.5}}}
    push(agent, collector, good)
    with caplog.at_level(logging.ERROR, logger="inference_agent.daemon"):
        for _ in range(3):
            push(agent, collector, bad)  # the samples are delivered all the same
    assert agent.desired == DesiredState.model_validate(good)  # limits not lifted, pools not changed
    assert refused(agent, "Malformed") == 1  # once per state, not once per push
    [line] = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert "desired state refused (Malformed)" in line.getMessage() and field in line.getMessage()
    push(agent, collector, None)  # null: nothing desired, as before
    assert agent.desired == DesiredState()


def test_an_agent_without_a_supervisor_reports_no_pools_and_offers_no_engine(
    agent: Agent, collector: FakeCollector
) -> None:
    push(agent, collector, None)
    report = collector.requests[-1]["report"]
    assert report["pools"] == {}  # the server counts its pool series as one ready replica each
    assert report["capabilities"] == {"engines": {}, "labels": {}}  # nothing may be placed on it


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


@pytest.mark.parametrize("text", ["vllm", "vllm=localhost:8000", "ollama=http://x/metrics", "built-in"])
def test_bad_workload_flag_says_what_is_accepted(text: str) -> None:
    with pytest.raises(ValueError, match="KIND=URL with KIND vllm, sglang, tgi, triton, llamacpp"):
        WorkloadSpec.parse(text)


def test_an_undeclared_engine_is_refused_reported_to_the_server_and_nothing_runs(
    tmp_path: Path, collector: FakeCollector, caplog: pytest.LogCaptureFixture
) -> None:
    """The control plane names an engine or a model; the node runs only what its config declared."""
    config_path = tmp_path / "node.toml"
    config_path.write_text(
        'labels = { zone = "eu-1" }\n[profiles.vllm]\ncommand = ["vllm", "serve", "{model}", "--port", "{port}"]\n'
        'models = ["Qwen/Qwen2.5-7B-Instruct"]\n'
    )
    settings = node_settings(tmp_path, serve_port=0)
    agent = Agent(settings, Probes(None, "no GPU"), config=AgentConfig.load(config_path), transport=collector.transport)
    try:
        assert agent.workload is not None
        builtin = {"pools": {"chat": {"replicas": 1}}}  # the built-in text engine: not offered here
        with caplog.at_level(logging.ERROR, logger="inference_agent.daemon"):
            push(agent, collector, {"pools": {"evil": {"replicas": 1, "engine": "shell", "model": "rm"}}})
            push(agent, collector, {"pools": {"chat": {"replicas": 1, "engine": "vllm", "model": "other/model"}}})
            push(agent, collector, builtin)
            push(agent, collector, builtin)  # its report tells the refusal of the answer before
        report = collector.requests[-1]["report"]
        assert report["refused"]["reason"] == "UnknownEngine"
        assert "the built-in 'text' engine is not declared" in report["refused"]["detail"]
        assert report["capabilities"] == {
            "engines": {"vllm": {"models": ["Qwen/Qwen2.5-7B-Instruct"], "serves": "text"}},
            "labels": {"zone": "eu-1"},
        }
        assert (refused(agent, "UnknownEngine"), refused(agent, "UnknownModel")) == (2, 1)  # once per state
        lines = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
        assert "engine 'shell' is not declared on this node" in lines[0]
        assert "may not serve model 'other/model'" in lines[1]
        agent.workload.supervisor.step()
        assert agent.workload.supervisor.target() == {} and agent.workload.supervisor.replica_counts() == {}
        declared = {"pools": {"chat": {"replicas": 0, "engine": "vllm", "model": "Qwen/Qwen2.5-7B-Instruct"}}}
        push(agent, collector, declared)
        push(agent, collector, declared)
        assert "refused" not in collector.requests[-1]["report"]  # taken: nothing refused any more
    finally:
        agent.close()

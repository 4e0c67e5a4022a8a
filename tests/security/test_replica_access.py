"""Issue 35 #13 and the replicas' environment: a replica on host loopback serves only the agent's front end (a key
made for each replica, presented as ``Authorization: Bearer``), so a direct call naming ``X-Tenant: vip`` at priority
0 is refused; and a replica's process starts with an explicit environment, never the agent's token. Real replica
processes started by the real supervisor."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from inference_agent.config import EngineProfile
from inference_agent.probes.builtin import BuiltinEngineProbe
from inference_agent.serving.frontend.server import Frontend
from inference_agent.serving.routing import Endpoint
from inference_agent.serving.supervision.launcher import ProcessLauncher
from inference_agent.serving.supervision.pools import PoolSpec
from inference_agent.serving.supervision.reconcile import Timing
from inference_agent.serving.supervision.supervisor import Supervisor
from tests.support.supervising import step_until
from wire.control import DesiredState

AGENT_TOKEN = "the-agent-token-no-replica-may-see"
VIP = {"X-Tenant": "vip", "X-Fleetpilot-Priority": "0"}
COMPLETION = {"model": "p", "prompt": "hi", "max_tokens": 2}


@pytest.fixture
def agent_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    token_file = tmp_path / "token"
    token_file.write_text(AGENT_TOKEN)
    monkeypatch.setenv("FLEETPILOT_TOKEN", AGENT_TOKEN)
    monkeypatch.setenv("FLEETPILOT_TOKEN_FILE", str(token_file))
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "another-secret")


def ready_endpoint(supervisor: Supervisor, pool: str) -> Endpoint:
    step_until(supervisor, lambda: bool(supervisor.routes()[pool].ready))
    return supervisor.routes()[pool].ready[0]


def environment_of(pid: int) -> dict[str, str]:
    raw = Path(f"/proc/{pid}/environ").read_bytes()
    return dict(entry.split("=", 1) for entry in raw.decode().split("\0") if "=" in entry)


@pytest.fixture
def builtin(tmp_path: Path, agent_environment: None) -> Iterator[Supervisor]:
    supervisor = Supervisor({"p": PoolSpec(1)}, ProcessLauncher(tmp_path / "logs", engine="fake"), cpus=(0, 1))
    yield supervisor
    supervisor.shutdown(5.0)


def test_a_direct_call_to_a_builtin_replica_is_refused_and_the_front_end_is_served(builtin: Supervisor) -> None:
    endpoint = ready_endpoint(builtin, "p")
    direct = httpx.post(f"{endpoint.url}/v1/completions", json=COMPLETION, headers=VIP, timeout=10)
    assert direct.status_code == 401, direct.text  # used to be served as tenant vip, at priority 0, with no quota
    assert "replica key" in direct.json()["detail"]
    assert httpx.post(f"{endpoint.url}/drain", headers=VIP, timeout=10).status_code == 401  # nor drained by anyone
    assert httpx.get(f"{endpoint.url}/stats", timeout=10).status_code == 401  # nor its tenants' usage read
    assert httpx.get(f"{endpoint.url}/healthz", timeout=10).status_code == 200  # health stays open: it says nothing
    frontend = Frontend(builtin.routes)
    frontend.start()
    try:
        served = httpx.post(f"http://127.0.0.1:{frontend.port}/v1/completions", json=COMPLETION, timeout=10)
        assert served.status_code == 200, served.text
    finally:
        frontend.close()
    reading = BuiltinEngineProbe(builtin.routes).read()[0]
    assert reading.error is None and "queue_depth_requests" in reading.metrics  # the agent reads /stats with it


def test_a_builtin_replica_starts_without_the_agents_token(builtin: Supervisor) -> None:
    ready_endpoint(builtin, "p")
    replica = next(r for r in builtin._replicas if r.process is not None)
    env = environment_of(replica.process.pid)  # type: ignore[union-attr]
    assert AGENT_TOKEN not in "".join(env.values())
    assert not {"FLEETPILOT_TOKEN", "FLEETPILOT_TOKEN_FILE", "AWS_SECRET_ACCESS_KEY"} & set(env)
    assert {"PATH", "FLEETPILOT_REPLICA_CPUS", "FLEETPILOT_REPLICA_KEY"} <= set(env)  # what it needs, and its key


def keyed_profile() -> EngineProfile:
    """The built-in replica run as an engine profile, its key given in its environment as a vLLM's would be
    (``VLLM_API_KEY = "{replica_key}"``; llama-server: ``LLAMA_API_KEY``)."""
    return EngineProfile(
        command=[
            "{python}",
            "-m",
            "inference_agent.serving.replica",
            *("--pool", "{pool}", "--kind", "text", "--port", "{port}", "--engine", "fake"),
            *("--served-model-name", "{model}"),
        ],
        env={"FLEETPILOT_REPLICA_KEY": "{replica_key}", "ENGINE_SETTING": "declared"},
        health_path="/health",
        models=["tiny-chat"],
        startup_timeout_seconds=60,
    )


def test_an_engine_profile_replica_gets_its_key_and_only_its_declared_environment(
    tmp_path: Path, agent_environment: None
) -> None:
    supervisor = Supervisor(
        {}, ProcessLauncher(tmp_path / "logs"), timing=Timing(), cpus=(0, 1), builtin=False,
        profiles={"keyed": keyed_profile()},
    )  # fmt: skip
    try:
        pool = {"replicas": 1, "engine": "keyed", "model": "tiny-chat"}
        supervisor.set_desired(DesiredState.model_validate({"pools": {"chat": pool}}))
        endpoint = ready_endpoint(supervisor, "chat")
        body = {**COMPLETION, "model": "tiny-chat"}
        assert httpx.post(f"{endpoint.url}/v1/completions", json=body, headers=VIP, timeout=10).status_code == 401
        keyed = httpx.post(f"{endpoint.url}/v1/completions", json=body, headers=endpoint.auth_headers, timeout=10)
        assert keyed.status_code == 200, keyed.text
        replica = next(r for r in supervisor._replicas if r.process is not None)
        env = environment_of(replica.process.pid)  # type: ignore[union-attr]
        assert env["ENGINE_SETTING"] == "declared" and "FLEETPILOT_TOKEN" not in env
    finally:
        supervisor.shutdown(5.0)


def test_a_replica_key_on_a_command_line_is_refused() -> None:
    with pytest.raises(ValueError, match="environment"):  # `ps` shows every command line on the host
        EngineProfile(command=["vllm", "serve", "--port", "{port}", "--api-key", "{replica_key}"])

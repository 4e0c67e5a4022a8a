"""Issue 35 #4: a remote_write token wrote as any node, agents' included (queue 5,000, 66,667 requests/s and 99 °C on
a live agent's node). A node an agent owns is never written by remote write or OTLP, and a remote_write token may be
scoped to the nodes it may name. Each test replays the attack through the API and failed before the fix."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from fastapi.testclient import TestClient
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
    ExportMetricsServiceResponse,
)
from sqlalchemy import Engine, select

from collector.tables import nodes, samples
from tests.conftest import gpu_sample
from tests.support.clock import FakeClock
from tests.support.remote_write import REMOTE_WRITE_HEADERS, Series, named, write_request

Auth = Callable[..., dict[str, str]]
T0 = FakeClock().now - 60
VLLM = {"model_name": "llama-8b", "engine": "0", "instance": "10.0.0.1:8000", "job": "vllm"}


def post(client: TestClient, headers: dict[str, str], series: Sequence[Series]) -> tuple[int, str]:
    answer = client.post("/api/v1/write", content=write_request(series), headers={**headers, **REMOTE_WRITE_HEADERS})
    return answer.status_code, answer.text


def queue(node: str, depth: float, ts: float = T0) -> Series:
    return named("vllm:num_requests_waiting", node=node, **VLLM), [(ts, depth)]


def queue_depths(engine: Engine, node: str) -> list[float | None]:
    with engine.connect() as conn:
        query = select(samples.c.queue_depth_requests).where(samples.c.node_id == node, samples.c.pool == "llama-8b")
        return list(conn.scalars(query))


def test_remote_write_may_not_write_a_node_an_agent_reports(client: TestClient, auth: Auth, engine: Engine) -> None:
    pushed = client.post(
        "/api/v1/ingest",
        json={"node_id": "gpu-1", "samples": [gpu_sample(1, T0)]},
        headers=auth("agent", node_id="gpu-1"),
    )
    assert pushed.status_code == 200
    status, text = post(client, auth("remote_write"), [queue("gpu-1", 5000.0), queue("gpu-2", 3.0)])
    assert status == 400 and "1 agent_node" in text and "'gpu-1' is an agent's" in text, text
    assert queue_depths(engine, "gpu-1") == []
    assert queue_depths(engine, "gpu-2") == [3.0]  # the rest of the request is stored
    with engine.connect() as conn:
        assert conn.scalar(select(nodes.c.source).where(nodes.c.id == "gpu-1")) == "agent"


def test_a_node_an_agent_token_names_is_refused_before_the_agents_first_push(
    client: TestClient, auth: Auth, engine: Engine, token: Callable[..., str]
) -> None:
    token("agent", node_id="gpu-9")  # the agent is yet to start
    status, text = post(client, auth("remote_write"), [queue("gpu-9", 5000.0)])
    assert status == 400 and "agent_node" in text, text
    with engine.connect() as conn:
        assert conn.scalar(select(nodes.c.id).where(nodes.c.id == "gpu-9")) is None


def test_otlp_may_not_write_an_agents_node_either(client: TestClient, auth: Auth, engine: Engine) -> None:
    client.post(
        "/api/v1/ingest",
        json={"node_id": "gpu-1", "samples": [gpu_sample(1, T0)]},
        headers=auth("agent", node_id="gpu-1"),
    )
    request = ExportMetricsServiceRequest()
    resource = request.resource_metrics.add()
    resource.resource.attributes.add(key="host.name", value={"string_value": "gpu-1"})
    metric = resource.scope_metrics.add().metrics.add(name="DCGM_FI_DEV_GPU_TEMP")
    point = metric.gauge.data_points.add(as_double=99.0, time_unix_nano=int(T0 * 1e9))
    point.attributes.add(key="gpu", value={"string_value": "0"})
    answer = client.post(
        "/api/v1/otlp/v1/metrics",
        content=request.SerializeToString(),
        headers={**auth("remote_write"), "Content-Type": "application/x-protobuf"},
    )
    partial = ExportMetricsServiceResponse.FromString(answer.content).partial_success
    assert partial.rejected_data_points == 1 and "agent_node" in partial.error_message
    with engine.connect() as conn:
        temperatures = conn.scalars(select(samples.c.gpu_temperature_celsius).where(samples.c.node_id == "gpu-1"))
        assert [t for t in temperatures if t is not None] == []


def test_a_scoped_token_writes_only_the_nodes_its_scope_names(client: TestClient, auth: Auth, engine: Engine) -> None:
    created = client.post(
        "/api/v1/tokens", json={"role": "remote_write", "node_scope": ["team-a-*"]}, headers=auth("admin")
    )
    assert created.status_code == 201 and created.json()["node_scope"] == ["team-a-*"]
    scoped = {"Authorization": f"Bearer {created.json()['token']}"}
    status, text = post(client, scoped, [queue("team-a-1", 2.0), queue("team-b-1", 4.0)])
    assert status == 400 and "1 out_of_scope" in text and "'team-b-1' is outside" in text and "team-a-*" in text
    assert queue_depths(engine, "team-a-1") == [2.0] and queue_depths(engine, "team-b-1") == []


def test_a_node_scope_is_refused_on_other_roles_and_bad_globs(client: TestClient, auth: Auth) -> None:
    admin = auth("admin")
    other_role = client.post("/api/v1/tokens", json={"role": "viewer", "node_scope": ["a*"]}, headers=admin)
    assert other_role.status_code == 422 and "only remote_write tokens" in other_role.text
    bad_glob = client.post("/api/v1/tokens", json={"role": "remote_write", "node_scope": ["a/b"]}, headers=admin)
    assert bad_glob.status_code == 422


def test_token_create_takes_a_node_scope_on_the_command_line(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/cli.db"
    command = [sys.executable, "-m", "fleetpilot", "token", "create", "--role", "remote_write"]
    made = subprocess.run(
        [*command, "--node-scope", "a-*,b-?", "--database-url", url],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert made.returncode == 0, made.stderr
    from collector.database import make_engine
    from web.tokens import TokenStore

    engine = make_engine(url)
    try:
        (info,) = TokenStore(engine).list()
    finally:
        engine.dispose()
    assert info.node_scope == ("a-*", "b-?")

"""Issue 15, "what held": the attacks of the security review that the control plane already refused, kept refused.
Each is the review's request, replayed; the fuller tables live beside the code they guard (the role matrix in
tests/web/test_role_matrix.py, the login limiter and redirects in tests/web/dashboard/test_login.py)."""

from __future__ import annotations

import gzip
import json
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import Engine, func, select

from alerting.receiver import LOOPBACK_NETWORKS
from alerting.sender import HttpxSender
from alerting.target_address import AddressPolicy
from collector.tables import samples
from tests.conftest import gpu_sample
from tests.support.clock import FakeClock
from tests.web.dashboard.conftest import sign_in
from web.app import create_app
from web.services import AppServices

Auth = Callable[..., dict[str, str]]


def stored(engine: Engine) -> int:
    with engine.connect() as conn:
        count: int = conn.execute(select(func.count()).select_from(samples)).scalar_one()
        return count


@pytest.mark.parametrize("node_id", ["a/b", "../etc", "node\nforged-log-line", "", "x" * 300])
def test_node_ids_that_could_forge_paths_or_log_lines_are_refused(
    client: TestClient, auth: Auth, engine: Engine, clock: FakeClock, node_id: str
) -> None:
    body = {"node_id": node_id, "samples": [gpu_sample(1, clock(), gpu_utilization_ratio=0.5)]}
    answer = client.post("/api/v1/ingest", json=body, headers=auth("agent", "node-a"))
    assert answer.status_code in (403, 422), answer.text
    assert stored(engine) == 0


@pytest.mark.parametrize(
    ("name", "raw"),
    [
        ("NaN literal", '{"gpu_utilization_ratio": NaN}'),
        ("Infinity literal", '{"gpu_power_watts": Infinity}'),
        ("200-deep nesting", '{"gpu_power_watts": 1}, "extra": {"x": ' + "[" * 200 + "]" * 200 + "}"),
    ],
)
def test_json_that_breaks_numbers_or_stacks_is_refused_and_nothing_stored(
    client: TestClient, auth: Auth, engine: Engine, clock: FakeClock, name: str, raw: str
) -> None:
    body = f'{{"node_id": "node-a", "samples": [{{"seq": 1, "ts": {clock()}, "device": 0, "metrics": {raw}}}]}}'
    answer = client.post(
        "/api/v1/ingest", content=body, headers={**auth("agent", "node-a"), "Content-Type": "application/json"}
    )
    assert answer.status_code in (400, 422), f"{name}: {answer.status_code} {answer.text}"
    assert stored(engine) == 0


def test_a_gzip_bomb_is_refused_before_it_inflates(client: TestClient, auth: Auth, engine: Engine) -> None:
    bomb = gzip.compress(b" " * (64 * 1024 * 1024))  # 64 MiB of spaces in ~64 KiB
    answer = client.post(
        "/api/v1/ingest",
        content=bomb,
        headers={**auth("agent", "node-a"), "Content-Encoding": "gzip", "Content-Type": "application/json"},
    )
    assert answer.status_code == 413, answer.text
    assert stored(engine) == 0


def test_names_with_markup_are_escaped_on_every_page_and_no_inline_script_may_run(
    services: AppServices, token: Callable[..., str], auth: Auth
) -> None:
    payload = '"><script>alert(1)</script><img src=x onerror=alert(2)>'
    with TestClient(create_app(services), raise_server_exceptions=False) as api:
        silence = {"matchers": [{"name": "alertname", "value": "x"}], "duration_seconds": 3600, "comment": payload}
        created = api.post("/api/v1/silences", json=silence, headers=auth("operator"))
        assert created.status_code in (200, 201), created.text
        browser = sign_in(TestClient(create_app(services), raise_server_exceptions=False), token("viewer"))
        page = browser.get("/alerts")
    assert page.status_code == 200
    assert "<script>alert(1)</script>" not in page.text
    assert "&lt;script&gt;" in page.text
    assert "script-src 'self'" in page.headers["content-security-policy"]
    assert "unsafe-inline" not in page.headers["content-security-policy"].split("script-src")[1].split(";")[0]


def test_no_sql_is_built_from_input(services: AppServices, auth: Auth) -> None:
    """A quote-laden name is data: stored and read back as written, and the tables are still there."""
    name = "p'; DROP TABLE pools; --"
    with TestClient(create_app(services), raise_server_exceptions=False) as api:
        answer = api.get("/api/v1/nodes", params={"status": name}, headers=auth("viewer"))
        assert answer.status_code in (200, 422)
        pools: Any = api.get("/api/v1/pools", headers=auth("viewer"))
    assert pools.status_code == 200
    assert json.loads(pools.text)["items"] == []


def test_the_webhook_sender_never_follows_a_redirect_inside() -> None:
    """A target answering 307 to an internal address: the delivery fails as HTTP 307, the payload goes nowhere else."""
    hits: list[str] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            hits.append(self.path)
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            self.send_response(307)
            self.send_header("Location", "/internal-admin")
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *_args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    sender = HttpxSender(timeout_seconds=5, policy=AddressPolicy.allowing(LOOPBACK_NETWORKS))
    try:
        result = sender.post(f"http://127.0.0.1:{server.server_port}/hook", b"{}", {})
    finally:
        sender.close()
        server.shutdown()
        server.server_close()
    assert not result.ok and result.error == "HTTP 307"
    assert hits == ["/hook"]

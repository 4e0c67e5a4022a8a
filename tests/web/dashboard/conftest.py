"""Dashboard fixtures: the app in-process, a signed-in client per role, and a node pushing through the real ingest;
for the audit tests, a signed-in user whose token is known and the rows the audit log holds."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from sqlalchemy import Engine

from tests.conftest import gpu_sample, pool_sample
from tests.support.clock import FakeClock
from web.app import create_app
from web.changes.audit import AuditEntry, AuditLog
from web.services import AppServices
from web.tokens import Role, TokenInfo

CSRF = re.compile(r'name="csrf_token" value="([^"]+)"')
GIB = 1 << 30
SECRET = "s3cret-signing-key-of-enough-length"  # a webhook secret the audit log must never show
HOOK_URL = "https://user:pw@hooks.example.com/x?key=k"  # credentials the audit log must never show


def csrf_of(html: str) -> str:
    found = CSRF.search(html)
    assert found is not None, "no CSRF token on the page"
    return found[1]


def sign_in(client: TestClient, token: str) -> TestClient:
    form = client.get("/login")
    answer = client.post("/login", data={"token": token, "csrf_token": csrf_of(form.text)}, follow_redirects=False)
    assert answer.status_code == 303, answer.text
    return client


@pytest.fixture
def app(services: AppServices) -> FastAPI:
    return create_app(services)


@pytest.fixture
def anonymous(app: FastAPI) -> Iterator[TestClient]:
    with TestClient(app, raise_server_exceptions=False) as client:
        yield client


@pytest.fixture
def browser(app: FastAPI, token: Callable[..., str]) -> Iterator[Callable[[str], TestClient]]:
    """``browser("operator")``: a client with its own cookie jar, signed in with a new token of that role."""
    opened: list[TestClient] = []

    def open_as(role: str) -> TestClient:
        client = TestClient(app, raise_server_exceptions=False)
        opened.append(client)
        return sign_in(client, token(role))

    yield open_as
    for client in opened:
        client.close()


def push(
    services: AppServices,
    client: TestClient,
    node_id: str,
    clock: FakeClock,
    *,
    seq: int = 1,
    pool: str = "chat",
    gpus: int = 1,
    extra: dict[str, Any] | None = None,
    report: dict[str, Any] | None = None,
    **metrics: float,
) -> int:
    """One batch from ``node_id``: a sample per GPU and one of ``pool``, stamped now; the next free seq. With
    ``report`` (a NodeReport's pools) the batch carries it, as agents do; without, the pool sample carries the
    extras of an agent before the report (one ready replica)."""
    _info, clear = services.tokens.create(Role.AGENT, now=clock(), node_id=node_id, name=f"agent-{node_id}-{seq}")
    samples = [gpu_sample(seq + i, clock(), device=i, gpu_temperature_celsius=60.0) for i in range(gpus)]
    pool_one = pool_sample(seq + gpus, clock(), pool=pool, **metrics)
    pool_one["extra"] = {
        **({} if report is not None else {"replicas_ready": 1, "replicas_starting": 0}),
        **(extra or {}),
    }
    samples.append(pool_one)
    body: dict[str, Any] = {
        "node_id": node_id,
        "samples": samples,
        "inventory": {
            "hostname": f"{node_id}.local",
            "gpus": [{"index": i, "name": "H100", "memory_total_bytes": 80 * GIB} for i in range(gpus)],
        },
    }
    if report is not None:
        body["report"] = {"ts": clock(), "pools": report}
    answer = client.post("/api/v1/ingest", json=body, headers={"Authorization": f"Bearer {clear}"})
    assert answer.status_code == 200, answer.text
    return seq + gpus + 1


@dataclass(frozen=True)
class User:
    """A signed-in browser and the token it signed in with (its id is the audit rows' actor)."""

    client: TestClient
    info: TokenInfo
    clear: str

    def submit(self, path: str, data: dict[str, str], *, csrf: bool = True) -> Any:
        """Post a form as the browser would: with the page's CSRF token, following the redirect."""
        token = csrf_of(self.client.get("/settings").text) if csrf else "stale"
        return self.client.post(path, data={**data, "csrf_token": token})


def rows(engine: Engine) -> list[AuditEntry]:
    """Every audit row, oldest first."""
    return list(reversed(AuditLog(engine).list(limit=1000)))


@pytest.fixture
def signed_in(app: FastAPI, services: AppServices, clock: FakeClock) -> Iterator[Callable[[str], User]]:
    """``signed_in("operator")``: a browser signed in with a new token named ``alice`` of that role."""
    opened: list[TestClient] = []

    def open_as(role: str) -> User:
        info, clear = services.tokens.create(Role(role), now=clock(), name="alice")
        client = TestClient(app, raise_server_exceptions=False)
        opened.append(client)
        return User(sign_in(client, clear), info, clear)

    yield open_as
    for client in opened:
        client.close()

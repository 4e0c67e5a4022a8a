"""Fixtures shared by every layer: a database on each backend, the app's services, a client, tokens, samples."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import Engine

from collector.database import make_engine
from fleetpilot.server import build_services
from fleetpilot.settings import ServerSettings
from migrations.schema import target_metadata
from tests.support.clock import FakeClock
from tests.support.postgres import fresh_database
from web.app import create_app
from web.services import AppServices
from web.tokens import Role


@pytest.fixture(scope="session")
def postgres_url() -> Iterator[str]:
    with fresh_database() as url:
        yield url


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def database_url(request: pytest.FixtureRequest, tmp_path: Any) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path}/fleetpilot.db"
    url: str = request.getfixturevalue("postgres_url")
    return url


@contextmanager
def empty_schema(url: str) -> Iterator[Engine]:
    """An empty schema at ``url`` (tables from the metadata; migrations are proven equal to it separately)."""
    engine = make_engine(url)
    target_metadata.drop_all(engine)
    target_metadata.create_all(engine)
    try:
        yield engine
    finally:
        engine.dispose()


@pytest.fixture
def engine(database_url: str) -> Iterator[Engine]:
    """An empty schema on the backend."""
    with empty_schema(database_url) as made:
        yield made


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def empty_database_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A database with no schema at all, on each backend, for the migrations to build."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path}/migrate.db"
        return
    with fresh_database() as url:
        yield url


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def settings(database_url: str) -> ServerSettings:
    return ServerSettings(database_url=database_url, token_cache_seconds=0)


@pytest.fixture
def services(settings: ServerSettings, engine: Engine, clock: FakeClock) -> AppServices:
    services = build_services(settings, engine)
    services.clock = clock
    return services


@pytest.fixture
def client(services: AppServices) -> Iterator[TestClient]:
    with TestClient(create_app(services), raise_server_exceptions=False) as client:
        yield client


@pytest.fixture
def token(services: AppServices, clock: FakeClock) -> Callable[..., str]:
    """``token("admin")`` or ``token("agent", node_id="node-a")``: a clear token of that role."""

    def make(role: str, node_id: str | None = None) -> str:
        _info, clear = services.tokens.create(Role(role), now=clock(), node_id=node_id)
        return clear

    return make


@pytest.fixture
def auth(token: Callable[..., str]) -> Callable[..., dict[str, str]]:
    """Authorization headers for a new token of ``role``."""

    def headers(role: str, node_id: str | None = None) -> dict[str, str]:
        return {"Authorization": f"Bearer {token(role, node_id)}"}

    return headers


def gpu_sample(seq: int, ts: float, device: int = 0, **metrics: float) -> dict[str, Any]:
    values = {"gpu_utilization_ratio": 0.5, "gpu_memory_used_bytes": 1e9, **metrics}
    return {"seq": seq, "ts": ts, "device": device, "pool": None, "metrics": values, "extra": {}}


def pool_sample(seq: int, ts: float, pool: str = "llama-8b", **metrics: float) -> dict[str, Any]:
    values = {"request_rate_per_second": 10.0, "queue_depth_requests": 1.0, **metrics}
    return {"seq": seq, "ts": ts, "device": None, "pool": pool, "metrics": values}

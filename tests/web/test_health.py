"""Health, readiness and the OpenAPI document."""

from __future__ import annotations

from fastapi.testclient import TestClient

from collector.database import make_engine
from fleetpilot.server import build_services
from fleetpilot.settings import ServerSettings
from web.app import create_app


def test_healthz_and_readyz(client: TestClient) -> None:
    assert client.get("/healthz").json() == {"status": "ok"}
    assert client.get("/readyz").status_code == 200


def test_readyz_is_503_without_a_database() -> None:
    url = "postgresql+psycopg://postgres@127.0.0.1:1/none"
    services = build_services(ServerSettings(database_url=url), make_engine(url, pool_pre_ping=False))
    with TestClient(create_app(services)) as client:
        assert client.get("/healthz").status_code == 200
        assert client.get("/readyz").status_code == 503


def test_openapi_documents_the_api(client: TestClient) -> None:
    paths = client.get("/openapi.json").json()["paths"]
    for path in ("/api/v1/ingest", "/api/v1/nodes", "/api/v1/nodes/{node_id}", "/api/v1/series", "/api/v1/tokens"):
        assert path in paths
    assert client.get("/docs").status_code == 200

"""The OpenAPI: complete (examples on the main bodies, every refusal declared in the one error shape), its docs page
served without the internet, and schemathesis finding no 5xx and no answer that breaks the schema."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import pytest
import schemathesis
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from hypothesis.errors import Unsatisfiable
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from fleetpilot.settings import ServerSettings
from web.app import create_app
from web.services import AppServices

Auth = Callable[..., dict[str, str]]
EXAMPLES = {
    ("/api/v1/pools", "post"),
    ("/api/v1/pools/{name}", "patch"),
    ("/api/v1/pools/{name}/scale", "post"),
    ("/api/v1/tenants", "post"),
    ("/api/v1/tenants/{name}", "patch"),
    ("/api/v1/tenants/{name}/quotas/{pool}", "put"),
    ("/api/v1/alert-rules", "post"),
    ("/api/v1/alert-rules/{rule_id}", "patch"),
    ("/api/v1/silences", "post"),
    ("/api/v1/webhooks", "post"),
    ("/api/v1/tokens", "post"),
}


def _schema_of(openapi: dict[str, Any], ref: dict[str, Any]) -> dict[str, Any]:
    name = ref["$ref"].rsplit("/", 1)[-1]
    found: dict[str, Any] = openapi["components"]["schemas"][name]
    return found


def test_main_request_bodies_carry_examples_that_the_api_accepts(client: TestClient, auth: Auth) -> None:
    openapi = client.get("/openapi.json").json()
    for path, method in sorted(EXAMPLES):
        body = openapi["paths"][path][method]["requestBody"]["content"]["application/json"]["schema"]
        assert _schema_of(openapi, body).get("examples"), (method, path)
    admin = auth("admin")
    for path, method in (("/api/v1/pools", "post"), ("/api/v1/tenants", "post"), ("/api/v1/alert-rules", "post")):
        body = openapi["paths"][path][method]["requestBody"]["content"]["application/json"]["schema"]
        example = _schema_of(openapi, body)["examples"][0]
        assert client.post(path, json=example, headers=admin).status_code == 201, example


def test_every_operation_declares_its_answer_and_the_error_shape(client: TestClient) -> None:
    openapi = client.get("/openapi.json").json()
    for path, operations in openapi["paths"].items():
        for method, op in operations.items():
            if path.startswith("/api/v1"):
                for status in ("401", "403", "422", "429"):
                    content = op["responses"][status]["content"]["application/json"]["schema"]
                    assert content == {"$ref": "#/components/schemas/ErrorOut"}, (method, path, status)
            ok = [s for s in op["responses"] if s.startswith("2")]
            assert ok, (method, path)
            if path.startswith("/api/v1") and ok[0] != "204":  # JSON, or OTLP's protobuf
                content = op["responses"][ok[0]]["content"]
                assert content.get("application/json", content.get(PROTOBUF, {}))["schema"], (method, path)


def test_docs_are_served_offline(client: TestClient) -> None:
    page = client.get("/docs")
    assert page.status_code == 200 and "swagger-ui" in page.text
    assert re.findall(r"(?:https?:)?//[\w.-]+", page.text) == [], "the docs page names an outside URL"
    for asset in [*re.findall(r"""(?:src|href)=['"]([^'"]+)['"]""", page.text), "/docs/assets/swagger-ui.css"]:
        assert client.get(asset).status_code == 200, asset
    assert client.get("/redoc").status_code == 404  # ReDoc loads from a CDN: not offered


@pytest.fixture
def admin_services(tmp_path: Any, clock: Any) -> AppServices:
    """A fresh SQLite database for the fuzzing run (no PostgreSQL variant: the contract is the schema, not the
    backend) and a generous failed-authentication limit."""
    from collector.database import make_engine
    from fleetpilot.server import build_services
    from migrations.schema import target_metadata

    url = f"sqlite:///{tmp_path}/fuzz.db"
    engine = make_engine(url)
    target_metadata.create_all(engine)
    services = build_services(ServerSettings(database_url=url, token_cache_seconds=0), engine)
    services.clock = clock
    return services


@pytest.fixture
def api_schema(admin_services: AppServices) -> Any:
    from web.tokens import Role

    _info, clear = admin_services.tokens.create(Role.ADMIN, now=admin_services.clock())
    app = create_app(admin_services)
    schema = schemathesis.openapi.from_asgi("/openapi.json", app)
    schema.config.headers = {"Authorization": f"Bearer {clear}"}
    return schema


PROTOBUF = "application/x-protobuf"
# remote write and OTLP bodies: random bytes (each is refused as a body, which is what the run checks)
schemathesis.openapi.media_type(PROTOBUF, st.binary(max_size=512))

CHECKS = [not_a_server_error, response_schema_conformance, status_code_conformance, content_type_conformance]
EXAMPLES_PER_OPERATION = 40


def _fuzz(operation: Any, mode: GenerationMode) -> str | None:
    """Run generated requests (valid ones, or ones the schema forbids) against one operation; the first failure in
    words, or None."""

    @given(case=operation.as_strategy(mode))
    @settings(
        max_examples=EXAMPLES_PER_OPERATION,
        deadline=None,
        derandomize=True,
        database=None,
        suppress_health_check=list(HealthCheck),
        phases=[Phase.explicit, Phase.generate],
    )
    def run(case: Any) -> None:
        case.call_and_validate(checks=CHECKS)

    try:
        run()
    except Unsatisfiable:  # nothing to make invalid: plain string path parameters, no parameters at all
        return None
    except (Exception, BaseExceptionGroup) as exc:  # schemathesis' failure group: reported per operation below
        return f"{operation.method.upper()} {operation.path} ({mode.value}): {exc}"[:3000]
    return None


@pytest.mark.slow
def test_generated_requests_get_no_5xx_and_answers_that_match_the_schema(api_schema: Any) -> None:
    """Every operation with an admin token, on SQLite, in-process (ASGI, no network); 40 valid and 40 invalid
    examples each keep the run near a minute on two cores. (The schemathesis pytest plugin's lazy fixture mode does
    not run on pytest 9, so the operations are driven through their Hypothesis strategies here.)"""
    operations = [result.ok() for result in api_schema.get_all_operations()]
    assert len(operations) >= 40
    runs = [_fuzz(op, mode) for op in operations for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE)]
    failures = [found for found in runs if found is not None]
    assert failures == [], "\n\n".join(failures)

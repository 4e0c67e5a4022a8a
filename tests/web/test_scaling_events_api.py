"""``GET /scaling-events``: each event's reason code, and the filter by code (an unknown code is 422 naming
``reason``)."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from fastapi.testclient import TestClient

from autoscaler.scaling_events import ReasonCode, ScalingEvent
from fleet.scaling_log import Outcome
from web.services import AppServices

Auth = Callable[..., dict[str, str]]


def event(pool: str, ts: float, to: int, code: ReasonCode | None) -> ScalingEvent:
    return ScalingEvent(pool, ts, 2, to, "hybrid", f"decided {to}", {}, Outcome.APPLIED, "local", reason_code=code)


@pytest.fixture
def recorded(services: AppServices) -> None:
    for e in (
        event("chat", 1.0, 4, ReasonCode.STEP_LIMIT),
        event("chat", 2.0, 6, ReasonCode.FORECAST_PEAK),
        event("vision", 3.0, 3, ReasonCode.STEP_LIMIT),
        event("chat", 4.0, 5, None),  # recorded before codes
    ):
        services.events.add(e)


@pytest.mark.usefixtures("recorded")
def test_each_event_says_its_reason_code_and_old_ones_null(client: TestClient, auth: Auth) -> None:
    items = client.get("/api/v1/scaling-events", headers=auth("viewer")).json()["items"]
    assert [(i["pool"], i["reason_code"]) for i in items] == [
        ("chat", None),
        ("vision", "StepLimit"),
        ("chat", "ForecastPeak"),
        ("chat", "StepLimit"),
    ]


@pytest.mark.usefixtures("recorded")
def test_reason_filters_by_code_alone_and_with_the_pool(client: TestClient, auth: Auth) -> None:
    viewer = auth("viewer")
    limited = client.get("/api/v1/scaling-events", params={"reason": "StepLimit"}, headers=viewer).json()
    assert [(i["pool"], i["to_replicas"]) for i in limited["items"]] == [("vision", 3), ("chat", 4)]
    chat = client.get("/api/v1/scaling-events", params={"reason": "StepLimit", "pool": "chat"}, headers=viewer)
    assert [i["ts"] for i in chat.json()["items"]] == [1.0]
    paged = client.get("/api/v1/scaling-events", params={"reason": "StepLimit", "limit": 1}, headers=viewer).json()
    rest = client.get(
        "/api/v1/scaling-events", params={"reason": "StepLimit", "limit": 1, "cursor": paged["next"]}, headers=viewer
    ).json()
    assert [i["pool"] for i in paged["items"] + rest["items"]] == ["vision", "chat"]


def test_an_unknown_reason_is_422_naming_reason(client: TestClient, auth: Auth) -> None:
    answer = client.get("/api/v1/scaling-events", params={"reason": "Vibes"}, headers=auth("viewer"))
    assert answer.status_code == 422
    error = answer.json()["error"]
    assert (error["field"], error["location"]) == ("reason", "query")
    assert "StepLimit" in error["message"]  # the known codes are listed

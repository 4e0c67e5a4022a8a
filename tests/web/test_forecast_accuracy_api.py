"""GET /api/v1/pools/{name}/forecast-accuracy: the stored windows of a pool's live accuracy, and whether the
autoscaler follows its forecast."""

from __future__ import annotations

from collections.abc import Callable

from fastapi.testclient import TestClient

from predictor.accuracy import WindowAccuracy
from tests.support.clock import FakeClock
from tests.support.forecasts import store_scored_forecast
from web.services import AppServices

Auth = Callable[..., dict[str, str]]


def test_the_windows_and_the_verdict(client: TestClient, auth: Auth, services: AppServices, clock: FakeClock) -> None:
    assert client.get("/api/v1/pools/chat/forecast-accuracy", headers=auth("viewer")).status_code == 404
    day = WindowAccuracy("24h", 1200, 18_000, 1.25, 0.88, 0.5, 1.0)
    week = WindowAccuracy("7d", 9000, 135_000, 0.71, 0.9, None, None)
    store_scored_forecast(services.forecasts, clock(), {"24h": day, "7d": week})
    answer = client.get("/api/v1/pools/chat/forecast-accuracy", headers=auth("viewer"))
    assert answer.status_code == 200
    body = answer.json()
    assert body["distrusted"] == "its forecasts scored worse than naive over the last 24h (MASE 1.25)"
    assert [w["window"] for w in body["windows"]] == ["24h", "7d"]
    assert body["windows"][1] == {
        "window": "7d",
        "forecasts": 9000,
        "points": 135_000,
        "mase": 0.71,
        "coverage90": 0.9,
        "saturation_precision": None,
        "saturation_recall": None,
    }

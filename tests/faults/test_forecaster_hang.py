"""A forecaster that hangs: the forecast loop gives up at its timeout and marks the pool's forecast stale, starts no
second cycle beside the wedged one, and the autoscaler, deciding through the controller, switches its predictive
policy off and scales reactively, saying so in the scaling event's reason.

In-process on each backend: the app (ingest and the scaling-event API), the real ForecastJob and Controller on the
same database; only the forecast cycle is injected, one that blocks until the test ends.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import Engine, insert

from autoscaler.controller import Controller, ControllerSettings
from collector.tables import NO_DEVICE, rollups_1m
from predictor.base import Forecast, ForecastError, History
from predictor.loop import ForecastJob, ForecastSettings
from tests.support.clock import FakeClock
from tests.support.fleet_reader import fleet_reader
from tests.support.rollups import rollup_row, set_watermark
from web.services import AppServices

POOL = "chat"
NODE = "node-a"
TIMEOUT_S = 0.2
HISTORY_MINUTES = 120


@pytest.fixture
def hanging_cycle() -> Iterator[Callable[[Mapping[str, History], int, str], Mapping[str, Forecast | ForecastError]]]:
    release = threading.Event()
    calls: list[int] = []

    def hang(_histories: Mapping[str, History], _h: int, _model: str) -> Mapping[str, Forecast | ForecastError]:
        calls.append(1)
        release.wait(60)  # a model stuck in a solver; released when the test ends so the worker thread exits
        return {}

    hang.calls = calls  # type: ignore[attr-defined]
    yield hang
    release.set()


def ingest_demand(client: TestClient, token: str, clock: FakeClock, seq: int, rate: float, ready: int) -> None:
    sample: dict[str, Any] = {
        "seq": seq,
        "ts": clock(),
        "device": None,
        "pool": POOL,
        "metrics": {"request_rate_per_second": rate},
        "extra": {"replicas_ready": ready, "replicas_starting": 0},
    }
    body = {"node_id": NODE, "samples": [sample]}
    response = client.post("/api/v1/ingest", json=body, headers={"Authorization": f"Bearer {token}"})
    assert response.status_code == 200, response.text


def rolled_up_history(engine: Engine, clock: FakeClock, rate: float) -> None:
    """Two hours of the pool's demand, already rolled up to minutes, as the rollup job would have left them."""
    end = math.floor(clock() / 60) * 60
    rows = [
        rollup_row(NODE, NO_DEVICE, POOL, end - 60 * (k + 1), request_rate_per_second=rate)
        for k in range(HISTORY_MINUTES)
    ]
    with engine.begin() as conn:
        conn.execute(insert(rollups_1m), rows)
        set_watermark(conn, end)


def test_a_hanging_forecaster_makes_the_autoscaler_fall_back_to_reactive_and_say_so(
    client: TestClient,
    services: AppServices,
    engine: Engine,
    clock: FakeClock,
    auth: Callable[..., dict[str, str]],
    token: Callable[..., str],
    hanging_cycle: Any,
) -> None:
    admin = auth("admin")
    pool = {"name": POOL, "policy": "predictive", "min_replicas": 1, "max_replicas": 20, "replica_capacity": 10.0}
    assert client.post("/api/v1/pools", json=pool, headers=admin).status_code == 201
    agent = token("agent", node_id=NODE)
    rolled_up_history(engine, clock, rate=30.0)
    ingest_demand(client, agent, clock, seq=1, rate=30.0, ready=4)
    controller = Controller(engine, ControllerSettings(), services.actuator, fleet=services.fleet, holder="test")

    settings = ForecastSettings(timeout_seconds=TIMEOUT_S, model="naive")
    working = ForecastJob(engine, settings, fleet=fleet_reader(engine))
    assert working.run(clock()).good >= 1
    first = controller.run(clock())[POOL]
    assert first.policy == "predictive" and "predictive off" not in first.reason, first.reason
    working.close()

    clock.advance(60)
    wedged = ForecastJob(engine, settings, fleet=fleet_reader(engine), cycle=hanging_cycle)
    report = wedged.run(clock())
    assert (report.good, report.failed) == (0, 1)
    ingest_demand(client, agent, clock, seq=2, rate=140.0, ready=4)  # 140/s at 0.7 × 10 each: 20 replicas
    decision = controller.run(clock())[POOL]
    assert decision.replicas > 4  # scaled up on the demand seen now, not held on a forecast gone stale
    newest = client.get(f"/api/v1/scaling-events?pool={POOL}", headers=admin).json()["items"][0]
    moved = (newest["from_replicas"], newest["to_replicas"], newest["policy"])
    assert moved == (first.replicas, decision.replicas, "predictive")  # from what the forecast had asked for
    reason = newest["reason"]
    assert f"predictive off (forecast stale: forecast cycle timed out after {TIMEOUT_S:g} s); reactive:" in reason
    assert newest["inputs"]["predictive"] == "off"

    clock.advance(60)
    again = wedged.run(clock())
    assert again.skipped == "previous cycle still running" and len(hanging_cycle.calls) == 1  # no second thread
    wedged.close()

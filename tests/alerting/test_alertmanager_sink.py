"""A real Alertmanager receives our alerts through its ``/api/v2/alerts`` API, and learns when they resolve."""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import datetime
from pathlib import Path

import pytest
from sqlalchemy import Engine

from alerting.evaluator import Evaluator, EvaluatorSettings
from alerting.outbox import DeliverySettings, Outbox, delivery_log
from alerting.receiver import LOOPBACK_NETWORKS
from alerting.rule_store import RuleStore
from alerting.rules import Op, RuleKind, RuleSpec
from alerting.sender import HttpxSender
from alerting.target_address import AddressPolicy
from alerting.webhooks import TargetKind, WebhookStore
from tests.alerting.alertmanager_process import AlertmanagerProcess, alertmanager_program
from tests.alerting.test_evaluator import push
from tests.support.fleet_reader import fleet_reader
from web.services import AppServices

pytestmark = pytest.mark.slow


def wait_for(condition: Callable[[], bool], timeout_s: float = 15.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.1)
    raise AssertionError("condition not met in time")


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
def test_alertmanager_holds_our_firing_alert_until_it_resolves(
    services: AppServices, engine: Engine, tmp_path: Path
) -> None:
    alertmanager_program()
    spec = RuleSpec(
        name="GpuHot",
        kind=RuleKind.THRESHOLD,
        metric="gpu_temperature_celsius",
        op=Op.GT,
        threshold=85,
        annotations={"action": "cool it"},
    )
    RuleStore(engine).create(spec, now=0)
    with AlertmanagerProcess(workdir=tmp_path / "am") as am:
        hook = WebhookStore(engine).create(am.url, None, kind=TargetKind.ALERTMANAGER, name="am", now=0)
        evaluator = Evaluator(
            engine, EvaluatorSettings(external_url="http://fleetpilot.test"), fleet=fleet_reader(engine), holder="t"
        )
        outbox = Outbox(
            engine, HttpxSender(timeout_seconds=5, policy=AddressPolicy.allowing(LOOPBACK_NETWORKS)), DeliverySettings()
        )
        try:
            now = time.time()
            push(services, "node-a", now, gpu_temperature_celsius=92)
            evaluator.run(now)
            assert outbox.run(now) == 1, delivery_log(engine, hook.id)
            wait_for(lambda: any(a["labels"].get("alertname") == "GpuHot" for a in am.alerts()))
            held = next(a for a in am.alerts() if a["labels"]["alertname"] == "GpuHot")
            assert held["labels"]["node"] == "node-a" and held["labels"]["severity"] == "warning"
            assert "rule_id" not in held["labels"]  # internal: the generator URL names the rule
            assert held["annotations"] == {"action": "cool it"} and held["status"]["state"] == "active"
            assert held["generatorURL"] == "http://fleetpilot.test/nodes/node-a"  # the dashboard's node page
            # held 4 evaluations of the resend delay (4 min), as Prometheus' alerts are; not 4 h past a dead server
            ends = datetime.fromisoformat(held["endsAt"].replace("Z", "+00:00")).timestamp()
            assert now + 200 < ends <= now + 241, held["endsAt"]
            later = time.time()
            push(services, "node-a", later, gpu_temperature_celsius=60)
            evaluator.run(later)
            assert outbox.run(later) == 1
            wait_for(lambda: not any(a["labels"].get("alertname") == "GpuHot" for a in am.alerts()))
        finally:
            evaluator.stop()
            outbox.close()

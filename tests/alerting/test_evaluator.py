"""The evaluation job on each database: inputs gathered from storage, alerts and outbox written together, silences,
the default pack seeded once, and a new leader carrying on from the stored alerts."""

from __future__ import annotations

import itertools
import json
from dataclasses import replace
from typing import Any

import pytest
from prometheus_client import CollectorRegistry
from sqlalchemy import Engine, delete, insert, select, update

from alerting.alert_store import AlertStore, SilenceStore
from alerting.defaults import DEFAULT_RULES
from alerting.evaluator import Evaluator, EvaluatorSettings
from alerting.lifecycle import AlertStatus, TransitionKind
from alerting.outbox import DeliverySettings, Outbox
from alerting.payload import rfc3339
from alerting.receiver import LOOPBACK_NETWORKS, WebhookReceiver
from alerting.rule_store import PACK_MARKER, RuleStore
from alerting.rules import EventKind, Op, RuleKind, RuleSpec, spec_columns
from alerting.sender import FakeSender, HttpxSender
from alerting.silences import Matcher
from alerting.tables import alert_rules, notifications
from alerting.target_address import AddressPolicy
from alerting.webhooks import TargetKind, WebhookStore
from autoscaler.scaling_events import EventStore, ScalingEvent
from collector.aggregate import Stat
from collector.batch import SampleBatch
from collector.skipped_rows import Job, SkippedRows, skipped_rows_counter
from collector.tables import NO_POOL, job_state, series_latest
from fleet.pools import Mode, PoolSpec, PoolStore
from fleet.scaling_log import Outcome
from isolation.events import EnforcementEvent, EnforcementStore
from predictor.store import ForecastPoint, ForecastStore, GoodForecast, SubjectKind
from tests.support.clock import FakeClock
from tests.support.fleet_reader import fleet_reader
from web.services import AppServices

SECRET = "a-secret-of-at-least-16"
SETTINGS = EvaluatorSettings(fresh_seconds=3.0, external_url="http://fleetpilot.test")
_seq = itertools.count(1)


def push(
    services: AppServices, node: str, now: float, *, device: int | None = 0, pool: str | None = None, **metrics: float
) -> None:
    sample: dict[str, Any] = {"seq": next(_seq), "ts": now, "device": device, "pool": pool, "metrics": metrics}
    services.writer.write_batch(SampleBatch.parse({"node_id": node, "samples": [sample]}), received_at=now)


def hot_rule(services: AppServices, **fields: Any) -> int:
    spec = {"kind": "threshold", "metric": "gpu_temperature_celsius", "op": ">", "threshold": 85, **fields}
    return RuleStore(services.engine).create(RuleSpec(name="GpuHot", **spec), now=0).id


def bodies(sender: FakeSender) -> list[dict[str, Any]]:
    return [json.loads(r.body) for r in sender.sent]


class Harness:
    def __init__(self, engine: Engine, holder: str = "server-a") -> None:
        self.sender = FakeSender()
        self.evaluator = Evaluator(engine, SETTINGS, fleet=fleet_reader(engine), holder=holder)
        self.outbox = Outbox(engine, self.sender, DeliverySettings())

    def tick(self, now: float) -> list[TransitionKind]:
        kinds = [t.kind for t in self.evaluator.run(now)]
        self.outbox.run(now)
        return kinds

    def close(self) -> None:
        self.evaluator.stop()
        self.outbox.close()


@pytest.fixture
def harness(engine: Engine) -> Any:
    h = Harness(engine)
    WebhookStore(engine).create("http://127.0.0.1:9/hook", SECRET, kind=TargetKind.WEBHOOK, name="oncall", now=0)
    yield h
    h.close()


def test_a_hot_gpu_fires_and_resolves_through_storage_and_the_outbox(
    services: AppServices, clock: FakeClock, harness: Harness
) -> None:
    rule_id = hot_rule(services)
    push(services, "node-a", clock(), gpu_temperature_celsius=90)
    push(services, "node-b", clock(), gpu_temperature_celsius=60)
    assert harness.tick(clock()) == [TransitionKind.FIRING]
    clock.advance(1)
    push(services, "node-a", clock(), gpu_temperature_celsius=91)
    assert harness.tick(clock()) == []  # still firing: not notified twice
    clock.advance(1)
    push(services, "node-a", clock(), gpu_temperature_celsius=70)
    assert harness.tick(clock()) == [TransitionKind.RESOLVED]
    firing, resolved = bodies(harness.sender)
    assert firing["status"] == "firing" and firing["receiver"] == "oncall"
    assert firing["alerts"][0]["labels"] == {"alertname": "GpuHot", "severity": "warning", "node": "node-a", "gpu": "0"}
    assert firing["alerts"][0]["generatorURL"] == "http://fleetpilot.test/nodes/node-a"  # the node's page
    assert rule_id
    assert (
        resolved["status"] == "resolved" and resolved["alerts"][0]["fingerprint"] == firing["alerts"][0]["fingerprint"]
    )
    stored = AlertStore(services.engine).list()
    assert [(a.status, a.value, a.last_notified_at) for a in stored] == [(AlertStatus.RESOLVED, 70.0, clock())]


def test_a_groups_notification_carries_every_firing_node_and_leaves_out_a_silenced_one(
    services: AppServices, clock: FakeClock
) -> None:
    spec = RuleSpec(name="Slow", kind=RuleKind.THRESHOLD, metric="request_latency_p99_seconds", op=Op.GT, threshold=1)
    RuleStore(services.engine).create(spec, now=0)
    SilenceStore(services.engine).create(
        [Matcher("node", "node-d")], starts_at=0, ends_at=clock() + 60, created_by="op", comment="", now=0
    )
    with WebhookReceiver(SECRET) as receiver:
        WebhookStore(services.engine).create(receiver.url, SECRET, kind=TargetKind.WEBHOOK, name="oncall", now=0)
        h = Harness(services.engine)
        h.outbox = Outbox(
            services.engine,
            HttpxSender(timeout_seconds=5, policy=AddressPolicy.allowing(LOOPBACK_NETWORKS)),
            DeliverySettings(),
        )
        try:
            for node in ("node-a", "node-d"):
                push(services, node, clock(), device=None, pool="chat", request_latency_p99_seconds=3)
            h.tick(clock())
            clock.advance(1)
            for node in ("node-a", "node-b", "node-c", "node-d"):
                push(services, node, clock(), device=None, pool="chat", request_latency_p99_seconds=3)
            push(services, "node-e", clock(), device=None, pool="embed", request_latency_p99_seconds=3)
            h.tick(clock())
        finally:
            h.close()
        received = [r.payload for r in receiver.accepted()]
    assert all(r.signature_ok for r in receiver.received)
    first, second = [p for p in received if p["groupLabels"].get("pool") == "chat"]  # one after the other
    (other_pool,) = [p for p in received if p["groupLabels"].get("pool") == "embed"]
    assert [a["labels"]["node"] for a in first["alerts"]] == ["node-a"]
    assert [a["labels"]["node"] for a in second["alerts"]] == ["node-b", "node-c", "node-a"]  # the new ones first
    assert second["counts"] == {"firing": 3, "resolved": 0} and second["groupKey"] == first["groupKey"]
    assert second["groupLabels"] == {"alertname": "Slow", "pool": "chat"}
    assert second["commonLabels"] == {"alertname": "Slow", "severity": "warning", "pool": "chat"}
    assert [a["labels"]["node"] for a in other_pool["alerts"]] == ["node-e"]


def test_a_silenced_alert_changes_state_but_notifies_only_after_the_silence(
    services: AppServices, clock: FakeClock, harness: Harness
) -> None:
    hot_rule(services)
    silences = SilenceStore(services.engine)
    silence = silences.create(
        [Matcher("node", "node-a")], starts_at=clock(), ends_at=clock() + 60, created_by="op", comment="", now=clock()
    )
    push(services, "node-a", clock(), gpu_temperature_celsius=90)
    assert harness.tick(clock()) == [] and harness.sender.sent == []
    assert [a.status for a in AlertStore(services.engine).list()] == [AlertStatus.FIRING]
    clock.advance(1)
    silences.expire(silence.id, now=clock())
    push(services, "node-a", clock(), gpu_temperature_celsius=90)
    assert harness.tick(clock()) == [TransitionKind.REPEAT]
    assert [b["status"] for b in bodies(harness.sender)] == ["firing"]


def test_a_new_leader_carries_on_from_the_stored_alerts(
    services: AppServices, clock: FakeClock, harness: Harness
) -> None:
    hot_rule(services)
    push(services, "node-a", clock(), gpu_temperature_celsius=90)
    assert harness.tick(clock()) == [TransitionKind.FIRING]
    other = Harness(services.engine, holder="server-b")
    try:
        assert other.tick(clock()) == []  # server-a leads
        harness.evaluator.stop()  # server-a goes away and releases the lease
        clock.advance(1)
        push(services, "node-a", clock(), gpu_temperature_celsius=92)
        assert other.tick(clock()) == []  # the stored firing alert is known: no second "firing"
        clock.advance(1)
        push(services, "node-a", clock(), gpu_temperature_celsius=50)
        assert other.tick(clock()) == [TransitionKind.RESOLVED]
    finally:
        other.close()
    assert len(AlertStore(services.engine).list()) == 1


def test_predictive_event_and_quota_rules_read_the_other_rooms(
    services: AppServices, clock: FakeClock, harness: Harness
) -> None:
    store = RuleStore(services.engine)
    store.create(RuleSpec(name="Soon", kind=RuleKind.PREDICTIVE, probability=0.5, horizon_seconds=900), now=0)
    store.create(
        RuleSpec(name="ScaleFail", kind=RuleKind.EVENT, event=EventKind.SCALING_FAILED, window_seconds=300), now=0
    )
    store.create(
        RuleSpec(name="Throttled", kind=RuleKind.EVENT, event=EventKind.QUOTA_ENFORCED, window_seconds=300), now=0
    )
    store.create(RuleSpec(name="Forecaster", kind=RuleKind.EVENT, event=EventKind.FORECAST_FAILING), now=0)
    now = clock()
    PoolStore(services.engine).create("chat", PoolSpec(), now=now)
    saturation = {"probability": 0.9, "eta_seconds": 300.0, "capacity": 100.0}
    good = GoodForecast(
        SubjectKind.POOL,
        "chat",
        "request_rate_per_second",
        now,
        "naive",
        now,
        60,
        900,
        now - 3600,
        now,
        [ForecastPoint(now + 60, 1, 0, 2)],
        saturation,
    )
    ForecastStore(services.engine).save([good])
    ForecastStore(services.engine).mark_failed(
        [(SubjectKind.POOL, "embed", "request_rate_per_second", "fit failed")], attempted_at=now
    )
    EventStore(services.engine).add(
        ScalingEvent("chat", now - 10, 2, 4, "hybrid", "up", {}, Outcome.FAILED, "local", "no")
    )
    EnforcementStore(services.engine).record(
        [EnforcementEvent(now - 5, "bulk", "node-a", "chat", "throttle", "NoisyNeighbour", 1.0, 0.5, "m", {})]
    )
    assert harness.tick(now).count(TransitionKind.FIRING) == 4
    names = sorted(a["labels"]["alertname"] for b in bodies(harness.sender) for a in b["alerts"])
    assert names == ["Forecaster", "ScaleFail", "Soon", "Throttled"]


def test_forecast_failing_waits_for_the_forecasters_warm_up_and_pages_once_it_had_a_forecast(
    services: AppServices, clock: FakeClock, harness: Harness
) -> None:
    RuleStore(services.engine).create(
        RuleSpec(name="Forecaster", kind=RuleKind.EVENT, event=EventKind.FORECAST_FAILING, for_seconds=60), now=0
    )
    store, key = ForecastStore(services.engine), (SubjectKind.POOL, "chat", "request_rate_per_second")
    short = "auto needs at least 3 observed values, got 1 (of 1 steps)"
    now = clock()
    for minute in range(10):  # ten minutes of too little history: warming up, never pending
        store.mark_failed([(*key, short)], attempted_at=now + 60 * minute, short_history={key})
        assert harness.tick(now + 60 * minute) == []
        assert AlertStore(services.engine).active() == {}
    now += 600
    good = GoodForecast(*key, now, "auto", now, 60, 900, now - 600, now, [ForecastPoint(now + 60, 1, 0, 2)], None)
    store.save([good])
    harness.tick(now)
    store.mark_failed([(*key, short)], attempted_at=now + 60, short_history={key})  # warmed up, then short again
    harness.tick(now + 60)
    assert [a.status for alerts in AlertStore(services.engine).active().values() for a in alerts.values()] == [
        AlertStatus.PENDING
    ]
    assert harness.tick(now + 121) == [TransitionKind.FIRING]
    store.mark_failed([(*key, "the model diverged")], attempted_at=now + 180)  # any other failure pages too
    assert harness.tick(now + 180) == []  # still firing


def test_the_default_pack_is_seeded_once_and_a_deleted_rule_stays_deleted(engine: Engine) -> None:
    store = RuleStore(engine)
    assert store.seed_defaults(now=0) == len(DEFAULT_RULES)
    assert store.seed_defaults(now=1) == 0
    first = store.list()
    assert len(first) == len(DEFAULT_RULES) and all(r.builtin for r in first)
    store.delete(first[0].id)
    assert store.seed_defaults(now=2) == 0
    assert len(store.list()) == len(DEFAULT_RULES) - 1


def test_a_newer_pack_replaces_the_shipped_rules_nobody_edited_and_leaves_the_rest(engine: Engine) -> None:
    store = RuleStore(engine)
    store.seed_defaults(now=0)
    by_key = {r.builtin: r for r in store.list()}
    # as pack 1 left a database: its marker, its P99 rule with a fixed 500 ms, one rule since removed from the pack,
    # and no near-SLO rule yet; an operator edited GpuTemperatureHigh and deleted DiskUsageHigh
    old_p99 = RuleSpec(
        name="P99LatencyHigh", kind=RuleKind.THRESHOLD, metric="request_latency_p99_seconds", op=Op.GT, threshold=0.5
    )
    with engine.begin() as conn:
        conn.execute(update(job_state).where(job_state.c.name == PACK_MARKER).values(watermark=1.0))
        conn.execute(
            update(alert_rules)
            .where(alert_rules.c.builtin == "p99_latency_high")
            .values(name=old_p99.name, spec=spec_columns(old_p99))
        )
        conn.execute(delete(alert_rules).where(alert_rules.c.builtin == "p99_latency_near_slo"))
        conn.execute(update(alert_rules).where(alert_rules.c.builtin == "packet_loss").values(builtin="retired_rule"))
    edited = store.update(by_key["gpu_hot"].id, {"threshold": 90}, now=1)
    store.delete(by_key["disk_full"].id)

    changed = store.seed_defaults(now=2)
    after = {r.builtin: r for r in store.list()}
    assert after["p99_latency_high"].spec == dict(DEFAULT_RULES)["p99_latency_high"]  # unedited: the new spec
    assert after["p99_latency_near_slo"].spec.slo_ratio == 0.8  # new in the pack: added
    assert "retired_rule" not in after  # gone from the pack, never edited: removed
    assert after["gpu_hot"].spec.threshold == 90 and after["gpu_hot"].version == edited.version  # the operator's
    assert "disk_full" not in after  # deleted stays deleted
    assert changed == (len(after) - 1) + 1  # every unedited rule replaced or added, and the one removed
    assert store.seed_defaults(now=3) == 0  # applied once


def test_pack_3_judges_network_latency_on_its_floor_in_a_database_pack_2_seeded(engine: Engine) -> None:
    store = RuleStore(engine)
    store.seed_defaults(now=0)
    shipped = {r.builtin: r for r in store.list()}
    pack_2 = {  # as pack 2 shipped them
        "network_latency_high": replace(dict(DEFAULT_RULES)["network_latency_high"], stat=Stat.P99, for_seconds=0),
        "saturation_predicted": replace(dict(DEFAULT_RULES)["saturation_predicted"], for_seconds=0),
    }
    with engine.begin() as conn:
        conn.execute(update(job_state).where(job_state.c.name == PACK_MARKER).values(watermark=2.0))
        for key, spec in pack_2.items():
            conn.execute(update(alert_rules).where(alert_rules.c.builtin == key).values(spec=spec_columns(spec)))
    store.update(shipped["saturation_predicted"].id, {"probability": 0.8}, now=1)  # an operator's: kept
    store.seed_defaults(now=2)
    after = {r.builtin: r.spec for r in store.list()}
    assert (after["network_latency_high"].stat, after["network_latency_high"].for_seconds) == (Stat.MIN, 300)
    assert after["saturation_predicted"].probability == 0.8 and after["saturation_predicted"].for_seconds == 0


def test_alerting_metrics_are_on_the_services_registry(services: AppServices, clock: FakeClock) -> None:
    from prometheus_client import generate_latest

    hot_rule(services)
    push(services, "node-a", clock(), gpu_temperature_celsius=90)
    evaluator = Evaluator(
        services.engine, SETTINGS, fleet=services.fleet, holder="a", telemetry=services.alerting_telemetry
    )
    try:
        evaluator.run(clock())
    finally:
        evaluator.stop()
    text = generate_latest(services.registry).decode()
    assert 'fleetpilot_alerting_alerts{status="firing"} 1.0' in text
    assert 'fleetpilot_alerting_transitions_total{kind="firing"} 1.0' in text
    assert "fleetpilot_alerting_evaluation_duration_seconds_count 1.0" in text


def test_a_row_whose_figures_break_the_evaluation_is_skipped_and_counted_and_the_others_are_judged(
    services: AppServices, clock: FakeClock, harness: Harness
) -> None:
    """A 400-digit integer written before ingest refused them: every evaluation used to fail on it (OverflowError)."""
    registry = CollectorRegistry()
    harness.evaluator.skipped = SkippedRows(Job.ALERTS, skipped_rows_counter(registry))
    hot_rule(services)
    push(services, "node-a", clock(), gpu_temperature_celsius=90)
    with services.engine.begin() as conn:
        conn.execute(
            insert(series_latest).values(
                node_id="node-b",
                device=0,
                pool=NO_POOL,
                ts=clock(),
                gpu_temperature_celsius=95.0,
                extra={"host_cpu_ratio": 10**400},
            )
        )
    assert harness.tick(clock()) == [TransitionKind.FIRING]
    assert [a.labels["node"] for a in AlertStore(services.engine).list()] == ["node-a"]
    assert registry.get_sample_value("fleetpilot_jobs_skipped_rows_total", {"job": "alerts"}) == 1


def test_a_latency_rule_fires_against_the_pools_own_slo_and_keeps_firing_through_a_quiet_minute(
    services: AppServices, clock: FakeClock, harness: Harness
) -> None:
    PoolStore(services.engine).create("chat", PoolSpec(slo_p99_seconds=10.0), now=clock())
    spec = RuleSpec(
        name="NearSlo",
        kind=RuleKind.THRESHOLD,
        metric="request_latency_p99_seconds",
        op=Op.GT,
        slo_ratio=0.8,
        keep_firing_seconds=120,
    )
    RuleStore(services.engine).create(spec, now=0)

    def latency(seconds: float) -> None:
        push(services, "node-a", clock(), device=None, pool="chat", request_latency_p99_seconds=seconds)

    latency(0.5)  # far under a 10-s SLO: what a fixed 500 ms rule would already have called critical
    assert harness.tick(clock()) == []
    clock.advance(1)
    latency(8.5)  # over 0.8 × 10 s
    assert harness.tick(clock()) == [TransitionKind.FIRING]
    clock.advance(60)
    latency(7.0)  # a quiet minute: still firing, nothing sent
    assert harness.tick(clock()) == []
    clock.advance(61)
    latency(7.0)  # 121 s since it last held
    assert harness.tick(clock()) == [TransitionKind.RESOLVED]


def test_scaling_stuck_judges_only_pools_whose_desired_count_fleetpilot_applies(
    services: AppServices, clock: FakeClock, harness: Harness
) -> None:
    """A dry-run pool's desired count is advice (decided and recorded, never applied), and so is it where an HPA or
    KEDA ScaledObject scales the pool's target: ready ≠ desired there by design, and paged ScalingStuck after 15
    minutes (issue 39). A pool fleetpilot scales still pages."""
    RuleStore(services.engine).create(
        RuleSpec(name="ScalingStuck", kind=RuleKind.EVENT, event=EventKind.SCALING_STUCK, for_seconds=900), now=0
    )
    store = PoolStore(services.engine)
    now = clock()
    for name, spec in (("acted", PoolSpec()), ("advised", PoolSpec(mode=Mode.DRY_RUN)), ("hpa", PoolSpec())):
        store.create(name, spec, now=now)
        store.set_desired(name, 3)  # no node reports a replica of any: 0 ready
    store.set_scaled_by("hpa", "HorizontalPodAutoscaler default/chat")
    assert harness.tick(now) == []
    clock.advance(901)
    assert harness.tick(clock()) == [TransitionKind.FIRING]
    (body,) = bodies(harness.sender)
    assert [a["labels"]["pool"] for a in body["alerts"]] == ["acted"]


def test_alertmanager_gets_every_firing_alert_again_each_resend_delay_valid_four_of_them(
    services: AppServices, clock: FakeClock, engine: Engine
) -> None:
    """As Prometheus: endsAt 4 × max(evaluation interval, resend delay) ahead (4 min), sent again every resend delay
    (1 min). It was 4 h ahead, so an alert outlived a dead fleetpilot by hours (issue 39). A resend replaces the
    target's undelivered notifications of the group, which could only tell Alertmanager an older end."""
    sender = FakeSender()
    evaluator = Evaluator(engine, SETTINGS, fleet=fleet_reader(engine), holder="a")
    outbox = Outbox(engine, sender, DeliverySettings())
    am = WebhookStore(engine).create("http://127.0.0.1:9093", None, kind=TargetKind.ALERTMANAGER, name="am", now=0)
    WebhookStore(engine).create("http://127.0.0.1:9/hook", SECRET, kind=TargetKind.WEBHOOK, name="oncall", now=0)
    hot_rule(services)
    try:
        start = clock()
        push(services, "node-a", start, gpu_temperature_celsius=90)
        evaluator.run(start)
        outbox.run(start)
        posted = [json.loads(r.body) for r in sender.sent if r.url.startswith("http://127.0.0.1:9093")]
        assert [a["endsAt"] for batch in posted for a in batch] == [rfc3339(start + 240)]
        for step in (30, 61):
            clock.advance(step - (clock() - start))
            push(services, "node-a", clock(), gpu_temperature_celsius=91)
            evaluator.run(clock())
        sender.sent.clear()
        outbox.run(clock())
        assert [r.url for r in sender.sent] == [f"{am.url}/api/v2/alerts"]  # the webhook is not repeated
        (again,) = json.loads(sender.sent[0].body)
        assert again["endsAt"] == rfc3339(start + 61 + 240) and again["labels"]["node"] == "node-a"

        sender.script.extend([503] * 100)  # Alertmanager away: one pending notification per group, the newest
        for _minute in (2, 3, 4):
            clock.advance(60)
            push(services, "node-a", clock(), gpu_temperature_celsius=91)
            evaluator.run(clock())
            outbox.run(clock())
        with engine.connect() as conn:
            query = select(notifications.c.body).where(
                notifications.c.webhook_id == am.id, notifications.c.status == "pending"
            )
            (waiting,) = conn.scalars(query).all()
        assert json.loads(waiting)[0]["endsAt"] == rfc3339(clock() + 240)
    finally:
        evaluator.stop()
        outbox.close()

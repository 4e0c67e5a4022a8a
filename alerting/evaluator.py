"""The alert evaluation job: every ``interval_seconds``, on the server holding the ``alerting`` lease.

A tick gathers the inputs the enabled rules need (:mod:`alerting.gather`), calls the pure :func:`evaluate` with
the state it keeps in memory (loaded from the stored active alerts when it becomes leader), leaves out of the
notifications what a silence matches, groups the rest by rule and pool (each group's notification carrying its other
firing alerts too, :func:`~alerting.payload.with_group`), and writes the alerts and one outbox row
per group and target in one transaction (:meth:`AlertStore.commit`). Only then does the state move on: a tick whose
write failed is evaluated again, so no transition is lost. Then it asks the outbox to deliver at once. Every
``alertmanager_resend_seconds`` the firing alerts go to each Alertmanager target again, as Prometheus resends them,
each valid ``alertmanager_valid_seconds`` (4 min): Alertmanager ends what is no longer sent.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass

from sqlalchemy import Engine

from alerting.alert_store import AlertStore, OutboxRow, SilenceStore, with_ids
from alerting.evaluate import changed, evaluate, mark_notified
from alerting.gather import WindowEdges, gather
from alerting.latest_readings import LatestReadings
from alerting.lifecycle import Alert, AlertStatus, Transition, TransitionKind
from alerting.payload import Group, alertmanager_alerts, encode, group, webhook_payload, with_group
from alerting.rule_store import RuleStore
from alerting.silences import Silence, silenced
from alerting.telemetry import AlertingTelemetry
from alerting.webhooks import TargetKind, Webhook, WebhookStore
from collector.skipped_rows import Job, SkippedRows
from fleet.lease import Lease
from fleet.view import FleetReader

log = logging.getLogger(__name__)
LEASE_NAME = "alerting"


@dataclass(frozen=True)
class EvaluatorSettings:
    interval_seconds: float = 1.0
    fresh_seconds: float = 3.0  # a reading older than this is not judged
    unseen_resolve_seconds: float = 600.0  # a firing alert without any verdict this long resolves
    lease_seconds: float = 15.0
    external_url: str = "http://127.0.0.1:8080"
    # Every firing alert is sent to each Alertmanager again this often (Prometheus' --rules.alert.resend-delay).
    alertmanager_resend_seconds: float = 60.0

    @property
    def alertmanager_valid_seconds(self) -> float:
        """How long Alertmanager keeps a firing alert of ours without hearing of it again: 4 × max(evaluation
        interval, resend delay), as Prometheus' rules manager sets ``ValidUntil`` (1 s and 60 s → 240 s). It was
        4 h 5 min, so the alerts of a fleetpilot that died stayed active that long."""
        return 4 * max(self.interval_seconds, self.alertmanager_resend_seconds)


class Evaluator:
    def __init__(
        self,
        engine: Engine,
        settings: EvaluatorSettings,
        *,
        fleet: FleetReader,
        holder: str,
        telemetry: AlertingTelemetry | None = None,
        on_notify: Callable[[], None] | None = None,
        skipped: SkippedRows | None = None,
    ) -> None:
        self.engine = engine
        self.settings = settings
        self.fleet = fleet
        self.telemetry = telemetry
        self.skipped = skipped if skipped is not None else SkippedRows(Job.ALERTS)
        self.on_notify = on_notify
        self.lease = Lease(engine, LEASE_NAME, holder, settings.lease_seconds)
        self.alerts = AlertStore(engine)
        self._state: dict[int, dict[str, Alert]] | None = None
        self._edges = WindowEdges()
        self._latest = LatestReadings()
        self._resent_at = float("-inf")  # when the firing alerts last went to the Alertmanager targets

    def run(self, now: float) -> list[Transition]:
        """One tick; the transitions notified (silenced ones left out), empty when another server leads."""
        if not self.lease.acquire(now):
            self._state = None
            return []
        started = time.perf_counter()
        try:
            notified, outbox = self._tick(now)
        except Exception:
            log.exception("alert evaluation failed; the next tick evaluates again")
            if self.telemetry is not None:
                self.telemetry.evaluation_failures.inc()
            return []
        if self.telemetry is not None:
            self.telemetry.evaluation_duration.observe(time.perf_counter() - started)
        if outbox and self.on_notify is not None:
            self.on_notify()
        return notified

    def stop(self) -> None:
        self.lease.release()

    def _tick(self, now: float) -> tuple[list[Transition], list[OutboxRow]]:
        rules = RuleStore(self.engine).list()
        if self._state is None:
            self._state = self.alerts.active()
        previous = self._state
        s = self.settings
        with self.engine.connect() as conn:
            inputs = gather(
                conn,
                [r for r in rules if r.spec.enabled],
                now,
                fleet=self.fleet,
                fresh_seconds=s.fresh_seconds,
                edges=self._edges,
                skipped=self.skipped,
                latest=self._latest,
            )
        result = evaluate(rules, inputs, previous, now, unseen_resolve_seconds=s.unseen_resolve_seconds)
        quiet = SilenceStore(self.engine).list(active_at=now)
        loud = [t for t in result.transitions if not silenced(t.alert.labels, quiet, now)]
        sent = mark_notified(result.state, with_group([t.alert for t in loud], _firing(result.state, quiet, now)), now)
        notified = [Transition(t.kind, alert) for t, alert in zip(loud, sent[: len(loud)], strict=True)]
        targets = WebhookStore(self.engine).list() if sent or self._resend_due(now) else []
        outbox = self._outbox(sent, targets, now)
        resend = self._resend(_firing(result.state, quiet, now), sent, targets, now) if self._resend_due(now) else []
        resolved = {(a.rule_id, a.fingerprint): a for a in [t.alert for t in result.transitions] + sent if _ended(a)}
        ids = self.alerts.commit(changed(previous, result.state), resolved.values(), result.dropped, outbox + resend)
        with_ids(result.state, ids)
        self._state = result.state
        if self._resend_due(now):
            self._resent_at = now
        hushed = [t for t in result.transitions if t.kind is not TransitionKind.REPEAT and t not in loud]
        self._count(notified, len(hushed))
        return notified, outbox + resend

    def _outbox(self, sent: Sequence[Alert], targets: Sequence[Webhook], now: float) -> list[OutboxRow]:
        """One row per group and target; an Alertmanager's replaces its older undelivered ones of the group."""
        rows = []
        for grouped in group(sent):
            for hook in targets:
                body = self._body(grouped, hook, now)
                rows.append(OutboxRow(hook.id, grouped.key, body, now, supersedes=_is_alertmanager(hook)))
        return rows

    def _resend_due(self, now: float) -> bool:
        return now - self._resent_at >= self.settings.alertmanager_resend_seconds

    def _resend(
        self, firing: Iterable[Alert], sent: Sequence[Alert], targets: Sequence[Webhook], now: float
    ) -> list[OutboxRow]:
        """Every firing alert not notified this tick, to each Alertmanager target again, so it stays active there
        ``alertmanager_valid_seconds`` more (what Prometheus does each resend delay); a webhook is not repeated."""
        alertmanagers = [hook for hook in targets if _is_alertmanager(hook)]
        just_sent = {(a.rule_id, a.fingerprint) for a in sent}
        again = [a for a in firing if (a.rule_id, a.fingerprint) not in just_sent] if alertmanagers else []
        return self._outbox(again, alertmanagers, now)

    def _body(self, grouped: Group, hook: Webhook, now: float) -> str:
        url = self.settings.external_url
        if hook.kind is TargetKind.ALERTMANAGER:
            body: object = alertmanager_alerts(
                grouped, external_url=url, valid_seconds=self.settings.alertmanager_valid_seconds, now=now
            )
        else:
            body = webhook_payload(grouped, receiver=hook.name, external_url=url)
        return encode(body).decode()

    def _count(self, transitions: Sequence[Transition], silenced_count: int) -> None:
        if self.telemetry is None or self._state is None:
            return
        for t in transitions:
            self.telemetry.transitions.labels(t.kind.value).inc()
            if t.kind is not TransitionKind.REPEAT:
                log.info("alert %s %s %s", t.alert.labels.get("alertname"), t.kind.value, dict(t.alert.labels))
        self.telemetry.silenced.inc(silenced_count)
        active = [a for alerts in self._state.values() for a in alerts.values()]
        for status in (AlertStatus.PENDING, AlertStatus.FIRING):
            self.telemetry.alerts.labels(status.value).set(sum(1 for a in active if a.status is status))


def _firing(state: Mapping[int, Mapping[str, Alert]], quiet: Sequence[Silence], now: float) -> Iterator[Alert]:
    """The firing alerts no silence matches (what a group's notification may carry besides its transitions)."""
    for alerts in state.values():
        for a in alerts.values():
            if a.status is AlertStatus.FIRING and not silenced(a.labels, quiet, now):
                yield a


def _ended(alert: Alert) -> bool:
    return alert.status is AlertStatus.RESOLVED


def _is_alertmanager(hook: Webhook) -> bool:
    return hook.kind is TargetKind.ALERTMANAGER

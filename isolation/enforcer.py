"""The noisy-neighbour enforcement loop: each tick, every pool on every up node is judged and noisy tenants are
throttled or restored.

A tick (``Enforcer.run(now)``, every ``interval_seconds`` from the server's scheduler):

1. takes or renews its own leader lease (``"enforcer"``, :mod:`fleet.lease`); a server without it does nothing
   and forgets its in-memory streaks, so that on winning the lease it starts again from the stored levels;
2. reads the latest pool readings of the up nodes and turns each one's per-tenant usage (the agent's
   ``extra["tenants"]``) into a :class:`~isolation.noisy.ScopeObservation` for scope ``node/pool``
   (:func:`observe`); a reading older than ``stale_after_seconds`` is not observed;
3. calls :func:`isolation.noisy.decide` with the state it keeps in memory;
4. stores every throttle and restore as an event and as the standing level (:mod:`isolation.events`), which the
   ingest answer applies (:mod:`isolation.desired`), and exports the levels and event counts as metrics.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge
from sqlalchemy import Engine

from collector.registry import LatestSeries, NodeStatus, node_statuses, read_latest
from collector.skipped_rows import Job, SkippedRows
from fleet.lease import Lease
from fleet.pools import PoolStore
from isolation.events import EnforcementEvent, EnforcementStore
from isolation.noisy import (
    Action,
    ActionKind,
    EnforcerSettings,
    EnforcerState,
    ScopeObservation,
    TenantEnforcement,
    TenantUsage,
    decide,
)
from isolation.tenants import SloClass, Tenant, TenantStore

log = logging.getLogger(__name__)

LEASE_NAME = "enforcer"
UNKNOWN_TENANT_CLASS = SloClass.STANDARD  # what the agent's admission gives a tenant the control plane never named


@dataclass(frozen=True)
class EnforcerLoopSettings:
    interval_seconds: float = 10.0
    node_down_after_seconds: float = 3.0
    lease_seconds: float = 15.0
    decide: EnforcerSettings = field(default_factory=EnforcerSettings)

    @property
    def stale_after_seconds(self) -> float:
        """A pool reading older than two ticks says nothing about this window."""
        return 2 * self.interval_seconds


class EnforcerTelemetry:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.level = Gauge(
            "fleetpilot_isolation_throttle_level",
            "A tenant's throttle level on a node's pool (1 = not throttled); its limits there are multiplied by it.",
            ["tenant", "scope"],
            registry=registry,
        )
        self.events = Counter(
            "fleetpilot_isolation_enforcement_events",
            "Enforcement events recorded, by tenant and kind (throttle, restore).",
            ["tenant", "kind"],
            registry=registry,
        )


def scope_of(node: str, pool: str) -> str:
    return f"{node}/{pool}"


def split_scope(scope: str) -> tuple[str, str]:
    """``"node-a/chat"`` → ("node-a", "chat"); pool names never hold a slash (``NAME_PATTERN``)."""
    node, pool = scope.rsplit("/", 1)
    return node, pool


class Enforcer:
    def __init__(
        self,
        engine: Engine,
        settings: EnforcerLoopSettings,
        *,
        holder: str,
        telemetry: EnforcerTelemetry | None = None,
        skipped: SkippedRows | None = None,
    ) -> None:
        self.engine = engine
        self.settings = settings
        self.store = EnforcementStore(engine)
        self.telemetry = telemetry
        self.skipped = skipped if skipped is not None else SkippedRows(Job.ENFORCER)
        self.lease = Lease(engine, LEASE_NAME, holder, settings.lease_seconds)
        self._state: EnforcerState | None = None  # None: not leading, or not yet loaded from the stored levels

    def run(self, now: float) -> list[Action]:
        """One tick; the actions decided (holds included), empty when another server leads."""
        if not self.lease.acquire(now):
            self._state = None
            return []
        tenants = TenantStore(self.engine).list()
        if not tenants:  # nobody to protect or throttle: no fleet read at all
            return []
        if self._state is None:
            self._state = self._stored_state()
        state, actions = decide(self._state, self._observe(now, tenants), self.settings.decide, now)
        changes = [a for a in actions if a.kind is not ActionKind.HOLD]
        if changes:  # stored before the state moves on: a failed write is decided again next tick
            self.store.record([_event(a) for a in changes])
        self._state = state
        for action in actions:
            log.log(logging.DEBUG if action.kind is ActionKind.HOLD else logging.INFO, "enforcer: %s", action.message)
        if self.telemetry is not None:
            for action in changes:
                self.telemetry.level.labels(action.tenant or "", action.scope).set(action.level_to or 1.0)
                self.telemetry.events.labels(action.tenant or "", action.kind.value).inc()
        return actions

    def stop(self) -> None:
        self.lease.release()

    def _stored_state(self) -> EnforcerState:
        """The standing levels with no streaks: a new leader goes on throttling, and counts windows afresh."""
        entries = {
            (scope_of(lv.node, lv.pool), lv.tenant): TenantEnforcement(lv.level, 0, 0, lv.changed_at)
            for lv in self.store.levels()
        }
        if self.telemetry is not None:
            for (scope, tenant), entry in entries.items():
                self.telemetry.level.labels(tenant, scope).set(entry.level)
        return EnforcerState(entries)

    def _observe(self, now: float, tenants: Sequence[Tenant]) -> list[ScopeObservation]:
        with self.engine.connect() as conn:
            statuses = node_statuses(conn, now=now, down_after_seconds=self.settings.node_down_after_seconds)
            up = sorted(n for n, s in statuses.items() if s is NodeStatus.UP)
            series = read_latest(conn, up, pools_only=True)
        fresh = [s for s in series if s.pool is not None and now - s.ts <= self.settings.stale_after_seconds]
        slo = {pool.name: pool.spec.slo_p99_seconds for pool in PoolStore(self.engine).list()}
        return observe(fresh, tenants, slo, self.skipped)


def observe(
    readings: Sequence[LatestSeries],
    tenants: Sequence[Tenant],
    slo_p99_seconds: Mapping[str, float],
    skipped: SkippedRows | None = None,
) -> list[ScopeObservation]:
    """One observation per pool reading that carries per-tenant usage; a reading without it is not observed, and
    one whose figures cannot be read (a 400-digit integer) is left out to ``skipped``.

    A tenant's compute share is its part of the pool's generated tokens/s when the pool generates text (its reading
    has ``token_throughput_per_second``), else of its requests/s: 90 and 10 tokens/s → 0.9 and 0.1. A tenant whose
    figure is missing gets no share (``decide`` then holds the scope); when nobody sent anything every share is 0.
    """
    by_name = {t.name: t for t in tenants}
    observed = [r for r in readings if r.pool is not None and isinstance((r.extra or {}).get("tenants"), Mapping)]
    skipped = skipped if skipped is not None else SkippedRows(Job.ENFORCER)
    return skipped.each(
        observed,
        lambda r: f"node {r.node_id} pool {r.pool}",
        lambda r: _observation(r, by_name, slo_p99_seconds.get(r.pool or "")),
    )


def _observation(reading: LatestSeries, by_name: Mapping[str, Tenant], slo: float | None) -> ScopeObservation:
    usage: Mapping[str, Any] = (reading.extra or {})["tenants"]
    pool = reading.pool or ""
    measure = "tokens_per_second" if "token_throughput_per_second" in reading.metrics else "requests_per_second"
    amounts = {name: _number(body, measure) for name, body in usage.items()}
    total = sum(v for v in amounts.values() if v is not None)
    return ScopeObservation(
        scope_of(reading.node_id, pool),
        tuple(
            _usage(name, usage[name], by_name.get(name), pool, amount, total, slo)
            for name, amount in sorted(amounts.items())
        ),
    )


def _usage(
    name: str, body: Any, tenant: Tenant | None, pool: str, amount: float | None, total: float, slo: float | None
) -> TenantUsage:
    quota = tenant.quotas.get(pool) if tenant is not None else None
    threads = quota.active_thread_percentage if quota is not None else None
    return TenantUsage(
        tenant=name,
        slo_class=(tenant.slo_class if tenant is not None else UNKNOWN_TENANT_CLASS).value,
        compute_share=None if amount is None else (amount / total if total > 0 else 0.0),
        latency_p99_seconds=_number(body, "latency_p99_seconds"),
        slo_p99_seconds=slo,
        quota_share=None if threads is None else threads / 100,
    )


def _number(body: Any, key: str) -> float | None:
    """A finite, non-negative figure of a tenant's usage, or None when it is absent or malformed."""
    value = body.get(key) if isinstance(body, Mapping) else None
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value < 0:
        return None
    return float(value)


def _event(action: Action) -> EnforcementEvent:
    node, pool = split_scope(action.scope)
    return EnforcementEvent(
        ts=action.at,
        tenant=action.tenant or "",
        node=node,
        pool=pool,
        kind=action.kind.value,
        reason=action.reason.value,
        level_from=action.level_from if action.level_from is not None else 1.0,
        level_to=action.level_to if action.level_to is not None else 1.0,
        message=action.message,
        figures=dict(action.figures),
    )

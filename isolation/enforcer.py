"""The noisy-neighbour enforcement loop: each tick, every pool on every up node is judged, noisy tenants are
throttled or restored, and the tenants part of the desired state is published.

A tick (``Enforcer.run(now)``, every ``interval_seconds`` from the server's scheduler):

1. takes or renews its own leader lease (``"enforcer"``, :mod:`fleet.lease`); a server without it does nothing
   and forgets its in-memory streaks, so that on winning the lease it starts again from the stored levels;
2. reads the fleet once (:class:`fleet.view.FleetReader`, the fleet's one liveness threshold) and turns each up
   node's pool, with the per-tenant usage of the node's latest report, into a
   :class:`~isolation.noisy.ScopeObservation` for scope ``node/pool`` (:func:`observe`); a pool whose readings are
   older than ``stale_after_seconds`` is not observed;
3. calls :func:`isolation.noisy.decide` with the state it keeps in memory;
4. stores every throttle and restore as an event and as the standing level (:mod:`isolation.events`), and exports
   the levels and event counts as metrics;
5. builds the tenants part from the same fleet view and the standing levels and publishes it
   (:class:`isolation.desired.TenantsPublisher`): the ingest answer only looks it up. With no tenant left the part
   published is empty, so nothing stays limited.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from prometheus_client import CollectorRegistry, Counter, Gauge

from collector.registry import PoolOnNode
from collector.skipped_rows import Job, SkippedRows
from fleet.desired.board import DesiredBoard
from fleet.lease import Lease
from fleet.pools import PoolStore
from fleet.view import FleetReader, FleetView
from isolation.desired import TenantsPublisher
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
from isolation.tenants import Tenant, TenantStore
from wire.control import SloClass
from wire.control import TenantUsage as ReportedUsage

log = logging.getLogger(__name__)

LEASE_NAME = "enforcer"
UNKNOWN_TENANT_CLASS = SloClass.STANDARD  # what the agent's admission gives a tenant the control plane never named


@dataclass(frozen=True)
class EnforcerLoopSettings:
    interval_seconds: float = 10.0
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
            multiprocess_mode="livemostrecent",
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
        fleet: FleetReader,
        settings: EnforcerLoopSettings,
        *,
        board: DesiredBoard,
        holder: str,
        telemetry: EnforcerTelemetry | None = None,
        skipped: SkippedRows | None = None,
    ) -> None:
        self.fleet = fleet
        self.engine = fleet.engine
        self.publisher = TenantsPublisher(fleet, board)
        self.settings = settings
        self.store = EnforcementStore(self.engine)
        self.telemetry = telemetry
        self.skipped = skipped if skipped is not None else SkippedRows(Job.ENFORCER)
        self.lease = Lease(self.engine, LEASE_NAME, holder, settings.lease_seconds)
        self._state: EnforcerState | None = None  # None: not leading, or not yet loaded from the stored levels

    def run(self, now: float) -> list[Action]:
        """One tick; the actions decided (holds included), empty when another server leads."""
        if not self.lease.acquire(now):
            self._state = None
            return []
        tenants = TenantStore(self.engine).list()
        view, actions = None, []
        if tenants:  # nobody to protect or throttle: no fleet read, and an empty part
            view = self.fleet.read(now)
            actions = self._decide(view, tenants, now)
        self.publisher.publish(now, view=view, tenants=tenants)
        return actions

    def stop(self) -> None:
        self.lease.release()

    def _decide(self, view: FleetView, tenants: Sequence[Tenant], now: float) -> list[Action]:
        if self._state is None:
            self._state = self._stored_state()
        state, actions = decide(self._state, self._observe(view, tenants, now), self.settings.decide, now)
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

    def _observe(self, view: FleetView, tenants: Sequence[Tenant], now: float) -> list[ScopeObservation]:
        fresh = [p for p in view.pools_on_nodes if now - p.ts <= self.settings.stale_after_seconds]
        slo = {pool.name: pool.spec.slo_p99_seconds for pool in PoolStore(self.engine).list()}
        return observe(fresh, tenants, slo, self.skipped)


def observe(
    pools: Sequence[PoolOnNode],
    tenants: Sequence[Tenant],
    slo_p99_seconds: Mapping[str, float],
    skipped: SkippedRows | None = None,
) -> list[ScopeObservation]:
    """One observation per pool on a node whose report carries per-tenant usage; a pool without it is not observed,
    and one whose figures break the observation is left out to ``skipped``.

    A tenant's compute share is its part of the pool's generated tokens/s when the pool generates text (its reading
    has ``token_throughput_per_second``), else of its requests/s: 90 and 10 tokens/s → 0.9 and 0.1. A tenant whose
    figure is missing gets no share (``decide`` then holds the scope); when nobody sent anything every share is 0.
    """
    by_name = {t.name: t for t in tenants}
    skipped = skipped if skipped is not None else SkippedRows(Job.ENFORCER)
    return skipped.each(
        [p for p in pools if p.tenants],
        lambda p: f"node {p.node_id} pool {p.pool}",
        lambda p: _observation(p, by_name, slo_p99_seconds.get(p.pool)),
    )


def _observation(on: PoolOnNode, by_name: Mapping[str, Tenant], slo: float | None) -> ScopeObservation:
    text = "token_throughput_per_second" in on.metrics
    amounts = {name: u.tokens_per_second if text else u.requests_per_second for name, u in on.tenants.items()}
    total = sum(v for v in amounts.values() if v is not None)
    return ScopeObservation(
        scope_of(on.node_id, on.pool),
        tuple(
            _usage(name, on.tenants[name], by_name.get(name), on.pool, amount, total, slo)
            for name, amount in sorted(amounts.items())
        ),
    )


def _usage(
    name: str,
    reported: ReportedUsage,
    tenant: Tenant | None,
    pool: str,
    amount: float | None,
    total: float,
    slo: float | None,
) -> TenantUsage:
    quota = tenant.quotas.get(pool) if tenant is not None else None
    threads = quota.active_thread_percentage if quota is not None else None
    return TenantUsage(
        tenant=name,
        slo_class=(tenant.slo_class if tenant is not None else UNKNOWN_TENANT_CLASS).value,
        compute_share=None if amount is None else (amount / total if total > 0 else 0.0),
        latency_p99_seconds=reported.latency_p99_seconds,
        slo_p99_seconds=slo,
        quota_share=None if threads is None else threads / 100,
    )


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

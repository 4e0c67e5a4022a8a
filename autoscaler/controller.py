"""The autoscaling control loop: each tick, every configured pool gets a decision, a record and (unless dry-run) an
actuation.

A tick (``Controller.run(now)``, every ``interval_seconds`` from the server's scheduler):

1. takes or renews the leader lease (:mod:`fleet.lease`); a server without it does nothing this tick, so with
   several servers on one database exactly one controller acts;
2. reads the fleet once (:class:`fleet.view.FleetReader`, with the fleet's one liveness threshold) and, per pool,
   builds the :class:`PoolContext`: ready and starting replicas and the summed demand from the up nodes, the
   per-replica capacity (configured, else learned by the forecast loop), the latest demand forecast (stale when its
   last attempt failed or it is older than ``forecast_stale_after_seconds``) and the pool's recent recommendations
   for the stabilization window, and the band scale of the pool's predictive bound (adapted after every tick to
   whether the ready replicas carried the demand: :func:`autoscaler.policy.band_scale.adapted_band_scale`);
3. decides: a manual scale still in force wins; otherwise the pool's policy through the safety rails;
4. stores the desired replicas, applies them through the actuator with the tick's fleet view (every tick, so a
   node that went down has its replicas placed elsewhere), and records a scaling event whenever the desired count
   changes or an actuation fails with a new error; exports the figures as metrics;
5. after every pool, has the actuator tell the nodes (local: the pools part of the desired-state board, for every
   up node at once, so the ingest answer only looks it up), and records the refusals the nodes report of the
   desired state they were told (:mod:`autoscaler.refusals`: once per node, pool and reason).
"""

from __future__ import annotations

import logging
from collections import defaultdict
from dataclasses import dataclass, replace

from prometheus_client import CollectorRegistry, Counter, Gauge
from sqlalchemy import Engine

from autoscaler.actuators.base import ActuationError, Actuator, NoPlacement, ScaledElsewhere
from autoscaler.hpa import KUBERNETES_SCALE_DOWN_WINDOW_S
from autoscaler.policy.band_scale import adapted_band_scale
from autoscaler.policy.decision import Decision, ForecastView, PoolContext
from autoscaler.policy.rails import guarded, rules_per_interval, scale_down_window_seconds
from autoscaler.policy.registry import FORECAST_POLICIES, make_policy
from autoscaler.policy.settings import PolicySettings
from autoscaler.refusals import RefusalEvents
from autoscaler.scaling_events import EventStore, ReasonCode, ScalingEvent
from autoscaler.startup import StartupLearner
from collector.skipped_rows import BAD_VALUE_ERRORS, Job, SkippedRows
from fleet.lease import Lease
from fleet.pools import Mode, Pool, PoolStore, Provisioning
from fleet.scaling_log import Outcome
from fleet.view import FleetReader, FleetView
from predictor.accuracy import distrusted
from predictor.capacity import replica_capacity
from predictor.store import ForecastStore, StoredForecast, SubjectKind

log = logging.getLogger(__name__)

LEASE_NAME = "autoscaler"
# Outcomes whose note is recorded once per distinct note: a failure, or a target another autoscaler scales
# ("external": an HPA or KEDA ScaledObject owns it; decided and recorded, not patched).
NOTED_OUTCOMES = frozenset({Outcome.FAILED, Outcome.EXTERNAL})


@dataclass(frozen=True)
class ControllerSettings:
    interval_seconds: float = 5.0
    forecast_stale_after_seconds: float = 180.0
    lease_seconds: float = 15.0
    # A new leader watches this long before acting: agents that were pushing to another server (or have just
    # started) must be seen first, or the first placement would put every replica on the first node to report.
    settle_seconds: float = 0.0
    # HPA's scale-down stabilization window (PolicySettings.stabilization_window_seconds), at least the startup
    scale_down_window_seconds: float = KUBERNETES_SCALE_DOWN_WINDOW_S


class AutoscalerTelemetry:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.desired = Gauge(
            "fleetpilot_autoscaler_desired_replicas",
            "Replicas the controller decided, by pool.",
            ["pool"],
            registry=registry,
            multiprocess_mode="livemostrecent",
        )
        self.ready = Gauge(
            "fleetpilot_autoscaler_ready_replicas",
            "Ready replicas the up nodes report, by pool.",
            ["pool"],
            registry=registry,
            multiprocess_mode="livemostrecent",
        )
        self.events = Counter(
            "fleetpilot_autoscaler_scaling_events",
            "Scaling events recorded, by pool, policy, outcome (applied, dry_run, external, failed) and reason code.",
            ["pool", "policy", "outcome", "reason"],
            registry=registry,
        )
        self.band_scale = Gauge(
            "fleetpilot_autoscaler_band_scale",
            "The predictive bound's scale on the forecast band's upper half-width, adapted toward the attainment "
            "target, by pool.",
            ["pool"],
            registry=registry,
            multiprocess_mode="livemostrecent",
        )
        self.leader = Gauge(
            "fleetpilot_autoscaler_leader",
            "1 while this server holds the autoscaler lease.",
            registry=registry,
            multiprocess_mode="livemax",  # with --workers: 1 while one of its workers holds it
        )


class Controller:
    def __init__(
        self,
        engine: Engine,
        settings: ControllerSettings,
        actuator: Actuator,
        *,
        fleet: FleetReader,
        holder: str,
        telemetry: AutoscalerTelemetry | None = None,
        skipped: SkippedRows | None = None,
    ) -> None:
        self.settings = settings
        self.actuator = actuator
        self.telemetry = telemetry
        # pool → the predictive bound's band scale (:func:`adapted_band_scale`), adapted every tick; a new leader
        # carries on from the one the pool stores (Provisioning)
        self._band_scale: dict[str, float] = {}
        self._startup: dict[str, StartupLearner] = {}  # pool → its replicas' startup, measured from its scale-ups
        self.skipped = skipped if skipped is not None else SkippedRows(Job.AUTOSCALER)
        self.engine = engine
        self.fleet = fleet
        self.pools = PoolStore(engine)
        self.forecasts = ForecastStore(engine)
        self.events = EventStore(engine)
        self.lease = Lease(engine, LEASE_NAME, holder, settings.lease_seconds)
        self._recent: dict[str, list[tuple[int, float]]] = defaultdict(list)  # pool → (recommendation, ts)
        self._last_failure: dict[str, str] = {}
        counted = telemetry.events if telemetry is not None else None
        self.refusals = RefusalEvents(self.events, actuator=actuator.name, counted=counted)
        self._leading_since: float | None = None

    def run(self, now: float) -> dict[str, Decision]:
        """One tick; the decisions by pool (empty when another server leads)."""
        leading = self.lease.acquire(now)
        if self.telemetry is not None:
            self.telemetry.leader.set(1 if leading else 0)
        if not leading:
            self._leading_since = None
            return {}
        if self._leading_since is None:
            self._leading_since = now
            if self.settings.settle_seconds > 0:
                log.info("autoscaler: leading; watching the fleet %.0f s before acting", self.settings.settle_seconds)
        if now - self._leading_since < self.settings.settle_seconds:
            return {}
        pools = self.pools.list()
        fleet = self.fleet.read(now)  # once per tick: every pool and every actuation share it
        decisions = {}
        for pool in pools:
            try:
                decisions[pool.name] = self._tick(pool, fleet, now)
            except BAD_VALUE_ERRORS as error:  # a bad forecast or fleet row: this pool waits, the others go on
                self.skipped.skip(f"pool {pool.name}", error)
            except Exception:  # any other trouble of one pool must not stop the others either
                log.exception("autoscaler: pool %s failed this tick", pool.name)
        try:
            self.actuator.publish(pools, fleet)
        except Exception:  # the nodes keep the last part published; the next tick tries again
            log.exception("autoscaler: telling the nodes their pools failed this tick")
        self.refusals.record(pools, fleet, now)
        return decisions

    def stop(self) -> None:
        self.lease.release()

    def startup(self, pool: Pool) -> StartupLearner:
        """The pool's startup learner: carried on from what the pool stores (another leader's estimate), anew when
        its configured startup changed since (an operator's correction)."""
        learner = self._startup.get(pool.name)
        if learner is None or learner.configured_seconds != pool.spec.startup_seconds:
            stored = pool.provisioning
            prior = None
            if learner is None and stored is not None and stored.startup_measurements > 0:
                prior = stored.startup_seconds
            learner = self._startup[pool.name] = StartupLearner(pool.spec.startup_seconds, prior)
        return learner

    def band_scale(self, pool: Pool) -> float | None:
        """The pool's band scale: this leader's, else the one the pool stores, else None (the target's own)."""
        if pool.name in self._band_scale:
            return self._band_scale[pool.name]
        stored = pool.provisioning
        return None if stored is None else stored.band_scale

    def context(self, pool: Pool, fleet: FleetView, now: float) -> PoolContext:
        startup = self.startup(pool)
        settings = PolicySettings(
            attainment_target=pool.spec.slo_attainment,
            stabilization_window_seconds=self.settings.scale_down_window_seconds,
            scale_up_rules=rules_per_interval(PolicySettings().scale_up_rules, self.settings.interval_seconds),
            scale_down_rules=rules_per_interval(PolicySettings().scale_down_rules, self.settings.interval_seconds),
        )
        window = scale_down_window_seconds(settings, startup.seconds)
        recent = [(r, at) for r, at in self._recent[pool.name] if now - at <= window]
        self._recent[pool.name] = recent
        return pool_context(
            pool,
            fleet,
            self.forecasts,
            now,
            forecast_stale_after_seconds=self.settings.forecast_stale_after_seconds,
            recent_recommendations=tuple((r, now - at) for r, at in recent),
            settings=settings,
            band_scale=self.band_scale(pool),
            startup=startup,
        )

    def _adapt_band_scale(self, pool: Pool, ctx: PoolContext) -> None:
        """After a tick of a predictive or hybrid pool: the band scale one interval on, from whether the ready
        replicas carried the fresh demand (no fresh demand or no capacity: nothing was measured, nothing moves)."""
        if pool.spec.policy not in FORECAST_POLICIES:
            self._band_scale.pop(pool.name, None)
            return
        if not ctx.demand_is_fresh or ctx.demand is None or ctx.per_replica_capacity is None:
            return
        missed = ctx.demand > ctx.ready_replicas * ctx.per_replica_capacity
        scale = adapted_band_scale(ctx.provisioning_scale, missed, ctx.settings, self.settings.interval_seconds)
        self._band_scale[pool.name] = scale
        if self.telemetry is not None:
            self.telemetry.band_scale.labels(pool.name).set(scale)

    def _store_provisioning(self, pool: Pool, decision: Decision, now: float) -> None:
        """Keep with the pool what it is decided by, when that changed visibly (the band scale to 3 significant
        digits, the startup and its measurements, what its bounds hold back): a write every few minutes, not every
        tick."""
        learner = self.startup(pool)
        scale = self.band_scale(pool) if pool.spec.policy in FORECAST_POLICIES else None
        shown = None if scale is None else float(f"{scale:.3g}")
        wanted = decision.recommended
        held = wanted if not pool.spec.min_replicas <= wanted <= pool.spec.max_replicas else None
        now_by = Provisioning(shown, learner.seconds, learner.measurements, now, held)
        stored = pool.provisioning
        if stored is None or replace(stored, ts=now) != now_by:
            self.pools.set_provisioning(pool.name, now_by)

    def _tick(self, pool: Pool, fleet: FleetView, now: float) -> Decision:
        ctx = self.context(pool, fleet, now)
        manual = pool.manual_at(now)
        if manual is not None:
            decision = Decision(
                manual.replicas,
                "manual",
                f"manual scale to {manual.replicas} ({manual.reason or 'no reason given'}) for another "
                f"{manual.until - now:.0f} s",
                {"manual_until": manual.until},
                code=ReasonCode.MANUAL_OVERRIDE,
                recommended=manual.replicas,
            )
        else:
            decision = guarded(make_policy(pool.spec.policy), ctx)
        self._adapt_band_scale(pool, ctx)
        self._recent[pool.name].append((decision.recommended, now))
        before = pool.desired_replicas if pool.desired_replicas is not None else self._running(pool, ctx, fleet)
        outcome, note, code = self._actuate(pool, decision, fleet)
        if outcome == Outcome.APPLIED:  # a scale-up only times a startup when it was made (not dry-run, not another's)
            self.startup(pool).observe(now, ctx.ready_replicas, decision.replicas)
        self._store_provisioning(pool, decision, now)
        changed = decision.replicas != before
        if changed or pool.desired_replicas is None:  # the first decision is the pool's desired count, changed or not
            self.pools.set_desired(pool.name, decision.replicas)
        failure_is_new = outcome in NOTED_OUTCOMES and self._last_failure.get(pool.name) != note
        if outcome not in NOTED_OUTCOMES:
            self._last_failure.pop(pool.name, None)
        if changed or failure_is_new:
            if failure_is_new and note is not None:
                self._last_failure[pool.name] = note
            self._record(pool, decision, before, outcome, note, code, now)
        if self.telemetry is not None:
            self.telemetry.desired.labels(pool.name).set(decision.replicas)
            self.telemetry.ready.labels(pool.name).set(ctx.ready_replicas)
        return decision

    def _running(self, pool: Pool, ctx: PoolContext, fleet: FleetView) -> int:
        """Before the first decision: the current replicas of the actuator's target (a Deployment's pods), else
        what the agents report."""
        try:
            known = self.actuator.current_replicas(pool, fleet)
        except ActuationError as exc:
            log.warning("autoscaler: %s: cannot read the current replicas: %s", pool.name, exc)
            known = None
        return known if known is not None else ctx.current_replicas

    def _actuate(self, pool: Pool, decision: Decision, fleet: FleetView) -> tuple[Outcome, str | None, ReasonCode]:
        """Outcome, note and the event's reason code: the decision's, NoPlacement when nowhere could take any, or
        ScaledByHpa/ScaledByKeda when another autoscaler scales the target (then the pool's ``scaled_by`` names it)."""
        if pool.spec.mode is Mode.DRY_RUN:
            return Outcome.DRY_RUN, "dry run: decided and recorded, not applied", decision.code
        try:
            note = self.actuator.apply(pool, decision.replicas, fleet)
        except ScaledElsewhere as exc:
            self._scaled_by(pool, exc.owner)
            return Outcome.EXTERNAL, str(exc), exc.code
        except ActuationError as exc:
            log.warning("autoscaler: %s: %s", pool.name, exc)
            return Outcome.FAILED, str(exc), ReasonCode.NO_PLACEMENT if isinstance(exc, NoPlacement) else decision.code
        self._scaled_by(pool, None)
        return Outcome.APPLIED, note, decision.code

    def _scaled_by(self, pool: Pool, owner: str | None) -> None:
        if pool.scaled_by != owner:
            self.pools.set_scaled_by(pool.name, owner)

    def _record(
        self,
        pool: Pool,
        decision: Decision,
        before: int,
        outcome: Outcome,
        note: str | None,
        code: ReasonCode,
        now: float,
    ) -> None:
        self.events.add(
            ScalingEvent(
                pool=pool.name,
                ts=now,
                from_replicas=before,
                to_replicas=decision.replicas,
                policy=decision.policy,
                reason=decision.reason,
                inputs=decision.recorded_inputs(),
                outcome=outcome,
                actuator=self.actuator.name,
                note=note,
                reason_code=code,
            )
        )
        if self.telemetry is not None:
            self.telemetry.events.labels(pool.name, decision.policy, outcome, code.value).inc()


def pool_context(
    pool: Pool,
    fleet: FleetView,
    forecasts: ForecastStore,
    now: float,
    *,
    forecast_stale_after_seconds: float,
    recent_recommendations: tuple[tuple[int, float], ...] = (),
    settings: PolicySettings | None = None,
    band_scale: float | None = None,
    startup: StartupLearner | None = None,
) -> PoolContext:
    """The pool's context at ``now``: live replicas and demand from the fleet view, the per-replica capacity
    (configured, else learned), the stored demand forecast, the startup (measured by ``startup`` once it has seen a
    scale-up ready, else configured); the controller and the KEDA scaler both decide on it."""
    spec = pool.spec
    metric = spec.demand_metric.value
    live = fleet.pool(pool.name, metric)
    stored = forecasts.get(SubjectKind.POOL, pool.name, metric)
    capacity = replica_capacity(spec.replica_capacity, lambda: stored.learned_capacity if stored else None)
    return PoolContext(
        now=now,
        min_replicas=spec.min_replicas,
        max_replicas=spec.max_replicas,
        ready_replicas=live.ready,
        starting_replicas=live.starting,
        per_replica_capacity=None if capacity is None else capacity.per_replica,
        demand=live.demand,
        demand_age_seconds=None if live.demand_ts is None else max(0.0, now - live.demand_ts),
        startup_seconds=spec.startup_seconds if startup is None else startup.seconds,
        startup_measurements=0 if startup is None else startup.measurements,
        forecast=forecast_view(stored, now, forecast_stale_after_seconds),
        recent_recommendations=recent_recommendations,
        settings=settings or PolicySettings(attainment_target=spec.slo_attainment),
        band_scale=band_scale,
    )


def forecast_view(stored: StoredForecast | None, now: float, stale_after_seconds: float) -> ForecastView | None:
    """The stored forecast as a policy sees it: stale when its last attempt failed or it is older than
    ``stale_after_seconds``; None when there never was a good one."""
    if stored is None or stored.good is None:
        return None
    good = stored.good
    view = ForecastView(
        good.origin_ts,
        tuple((p.ts, p.yhat, p.lo, p.hi) for p in good.points),
        levels=good.levels,
        quantiles=tuple(p.quantiles for p in good.points) if good.levels else (),
        model=good.model,
    )
    age = now - good.generated_at
    if stored.stale:
        return replace(view, stale=True, error=stored.error)
    if age > stale_after_seconds:
        return replace(view, stale=True, error=f"the last forecast is {age:.0f} s old")
    day = (stored.accuracy or {}).get("24h")
    return replace(view, distrusted=distrusted(day) if day is not None else None)

"""The live figures the fleet health report judges (:mod:`collector.fleet_health`), read from the stores: the last
15 minutes of rollups against the 15 minutes before (the trend), the latest KV fragmentation the agents report, and
the scale-ups of the last hour against the pools' planned startup, the failovers of the last hour from a lost node's
detection to its pool ready again. What nothing measures stays None, with why."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from sqlalchemy import Connection

from autoscaler.failover import FailoverStore
from collector.fleet_health import FleetFigures, failover_seconds, figures_from_window, scale_up_seconds, worst
from collector.registry import NodeStatus, node_gpus, read_latest
from collector.series import pool_replica_history, window_stats
from fleet.pools import Pool
from fleet.scaling_log import Outcome
from predictor.store import SubjectKind
from web.services import AppServices

WINDOW_SECONDS = 900.0
SCALE_UP_LOOKBACK_SECONDS = 3600.0
SCALE_UP_STEP_SECONDS = 5.0
FAILOVER_LOOKBACK_SECONDS = 3600.0
NOT_MEASURED = {
    "gpu_memory_use_ratio": "no rolled-up minute of GPU memory in the window",
    "gpu_utilization_ratio": "no rolled-up minute of GPU utilization in the window",
    "kv_cache_peak_ratio": "no rolled-up minute of KV-cache use in the window",
    "latency_p99_over_slo": "no rolled-up minute of p99 latency from a pool with an SLO",
    "load_spread_ratio": "needs GPU utilization from at least two nodes",
    "kv_fragmentation_ratio": "no replica reports KV fragmentation (engines without a paged KV cache do not)",
    "failover_seconds": "no node holding placed replicas went down in the last hour",
    "forecast_mase": "no pool forecast scored yet: one is scored once its 15-minute horizon has passed",
}


@dataclass(frozen=True)
class GatheredHealth:
    gpus: int
    now: FleetFigures
    before: FleetFigures


def _fragmentation(conn: Connection, up: Sequence[str]) -> float | None:
    found = [
        float(value)
        for s in read_latest(conn, up, pools_only=True)
        if isinstance(value := (s.extra or {}).get("kv_fragmentation_ratio"), int | float)
    ]
    return max(found) if found else None


def _scale_up(conn: Connection, services: AppServices, pools: Sequence[Pool], now: float) -> tuple[float | None, str]:
    """The worst applied scale-up of the last hour as a multiple of its pool's startup_seconds, with a note."""
    ratios: list[float] = []
    notes: list[str] = []
    for pool in pools:
        ups = [
            e
            for e in services.events.list(pool=pool.name, limit=100)
            if e.ts >= now - SCALE_UP_LOOKBACK_SECONDS
            and e.outcome == Outcome.APPLIED
            and e.to_replicas > e.from_replicas
        ]
        if not ups:
            continue
        history = pool_replica_history(conn, pool.name, min(e.ts for e in ups), now, SCALE_UP_STEP_SECONDS)
        for event in ups:
            took = scale_up_seconds(event.ts, event.to_replicas, history)
            if took is not None and pool.spec.startup_seconds > 0:
                ratios.append(took / pool.spec.startup_seconds)
                notes.append(
                    f"{pool.name}: {took:.0f} s for {event.from_replicas}→{event.to_replicas}, "
                    f"{pool.spec.startup_seconds:.0f} s planned"
                )
    if not ratios:
        return None, "no applied scale-up reached its target in the last hour"
    return worst(ratios), "; ".join(notes[:3])


def _failover(services: AppServices, now: float) -> tuple[float | None, str]:
    """The worst failover of the last hour (detection → ready, or open so far), with a note naming it."""
    found = FailoverStore(services.engine).since(now - FAILOVER_LOOKBACK_SECONDS)
    seconds = failover_seconds([(f.detected_at, f.ready_at) for f in found], now)
    if seconds is None:
        return None, NOT_MEASURED["failover_seconds"]
    slowest = max(found, key=lambda f: f.seconds(now))
    state = "ready" if slowest.ready_at is not None else "not ready yet"
    waiting = sum(f.ready_at is None for f in found)
    return seconds, (
        f"{len(found)} in the last hour ({waiting} not ready yet); worst: {slowest.pool}, {slowest.replicas} "
        f"replicas off {slowest.node_id}, {state} {slowest.seconds(now):.1f} s after detection"
    )


def _forecast_mase(services: AppServices) -> tuple[float | None, str]:
    """The worst pool's live MASE over the last 24 h (its forecasts against the naive ones on the same targets)."""
    scored = [
        (s.subject, day)
        for s in services.forecasts.list(SubjectKind.POOL)
        if s.accuracy is not None and (day := s.accuracy.get("24h")) is not None and day.mase is not None
    ]
    if not scored:
        return None, NOT_MEASURED["forecast_mase"]
    pool, day = max(scored, key=lambda found: found[1].mase or 0.0)
    coverage = f", 90 % interval covering {100 * day.coverage90:.0f} %" if day.coverage90 is not None else ""
    return day.mase, f"worst of {len(scored)} pools over 24 h: {pool}, {day.points} points{coverage}"


def gather(services: AppServices) -> GatheredHealth:
    now = services.clock()
    slo = {p.name: p.spec.slo_p99_seconds for p in services.pools.list()}
    with services.engine.connect() as conn:
        statuses = services.fleet.statuses(conn, now)
        up = sorted(n for n, s in statuses.items() if s is NodeStatus.UP)
        gpus = node_gpus(conn, up)
        totals = {(n, g.index): g.memory_total_bytes or 0 for n, found in gpus.items() for g in found}
        current = figures_from_window(window_stats(conn, now - WINDOW_SECONDS, now), totals, slo)
        earlier = figures_from_window(window_stats(conn, now - 2 * WINDOW_SECONDS, now - WINDOW_SECONDS), totals, slo)
        fragmentation = _fragmentation(conn, up)
        scale_up, scale_note = _scale_up(conn, services, services.pools.list(), now)
    failover, failover_note = _failover(services, now)
    mase, mase_note = _forecast_mase(services)
    measured = replace(
        current,
        kv_fragmentation_ratio=fragmentation,
        scale_up_over_planned=scale_up,
        failover_seconds=failover,
        forecast_mase=mase,
    )
    notes = {k: v for k, v in NOT_MEASURED.items() if getattr(measured, k) is None}
    notes["scale_up_over_planned"] = scale_note
    notes["failover_seconds"] = failover_note
    notes["forecast_mase"] = mase_note
    return GatheredHealth(sum(len(g) for g in gpus.values()), replace(measured, notes=notes), earlier)

"""The forecast loop: each cycle forecasts every pool's demand, every GPU's memory and every replica set's KV cache.

A cycle (``ForecastJob.run(now)``, called by the server's scheduler once a minute by default):

1. reads the inputs from storage (:mod:`predictor.inputs`): 1-minute histories up to the last rolled-up minute, each
   pool's ready replicas on the up nodes (the fleet's one :class:`~fleet.view.FleetReader`) and its per-replica
   capacity (:func:`predictor.capacity.replica_capacity`: configured, or learned from the raw samples and refreshed
   every ``capacity_refresh_seconds``);
2. forecasts them all in one :func:`predictor.cycle.forecast_cycle` call on a worker thread, waiting at most
   ``timeout_seconds``;
3. turns each forecast into points and a saturation estimate against the subject's capacity (a pool: ready
   replicas × per-replica capacity; a GPU: ``exhaustion_ratio`` of its memory; a KV cache: ``exhaustion_ratio``);
4. stores the good ones and marks the failed ones stale (:mod:`predictor.store`), and exports the figures.

A cycle that times out marks every subject stale; while its worker is still busy the next cycle does not start a
second one but records that it could not run, so a wedged model never stacks threads or serves old numbers as new.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import Engine

from collector.skipped_rows import Job, SkippedRows
from fleet.pools import Pool, PoolSpec, PoolStore
from fleet.view import FleetReader
from predictor import accuracy_store, inputs
from predictor.accuracy import WINDOWS_SECONDS
from predictor.auto_choice import OTHER_SUBJECTS_MODEL, AutoChooser, Choice, DecisionPoint, decision_point
from predictor.backends.auto import CANDIDATES, PRIOR
from predictor.backtest import horizon_steps
from predictor.base import Forecast, ForecastError, History, NotEnoughHistory, non_negative
from predictor.capacity import NoCapacity, PoolCapacity, ReplicaCapacity, learn_capacity, replica_capacity
from predictor.cycle import DEFAULT_MODEL, forecast_cycle
from predictor.saturation import saturation
from predictor.store import ForecastPoint, ForecastStore, GoodForecast, Key, SubjectKind
from predictor.telemetry import ForecastTelemetry

log = logging.getLogger(__name__)

Cycle = Callable[[Mapping[str, History], int, str], Mapping[str, Forecast | ForecastError]]


@dataclass(frozen=True)
class ForecastSettings:
    horizon_seconds: float = 900.0
    pool_history_seconds: float = 2 * 86_400.0  # two days: a daily season seen twice
    node_history_seconds: float = 2 * 3_600.0  # memory trends are short; thousands of GPUs each minute
    timeout_seconds: float = 30.0
    capacity_window_seconds: float = 3_600.0
    capacity_refresh_seconds: float = 600.0
    exhaustion_ratio: float = 0.95
    model: str = DEFAULT_MODEL


@dataclass(frozen=True)
class Subject:
    """One series to forecast and what its saturation is measured against: a pool's replicas and per-replica
    capacity (``pool``), or what a device's or a KV cache's capacity is a share of (``context``)."""

    history: History
    capacity: float | None
    pool: PoolCapacity | None = None
    context: Mapping[str, float] = field(default_factory=dict)
    decision: DecisionPoint | None = None  # a pool's: where auto scores its candidates


@dataclass(frozen=True)
class CycleReport:
    good: int
    failed: int
    seconds: float
    skipped: str | None = None  # why the cycle did not run (no rollups yet, the previous cycle still busy)


@dataclass
class _CapacityCache:
    learned: dict[str, tuple[float, ReplicaCapacity | NoCapacity]] = field(default_factory=dict)  # pool → (at, it)


def _key_name(key: Key) -> str:
    return "\x1f".join((key[0].value, key[1], key[2]))


class ForecastJob:
    def __init__(
        self,
        engine: Engine,
        settings: ForecastSettings,
        *,
        fleet: FleetReader,
        telemetry: ForecastTelemetry | None = None,
        cycle: Cycle = forecast_cycle,
        skipped: SkippedRows | None = None,
    ) -> None:
        self.engine = engine
        self.cycle = cycle
        self.settings = settings
        self.fleet = fleet
        self.skipped = skipped if skipped is not None else SkippedRows(Job.FORECASTS)
        self.store = ForecastStore(engine)
        self.pools = PoolStore(engine)
        self.telemetry = telemetry
        self._capacity = _CapacityCache()
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="forecast")
        self._running: Future[dict[str, Mapping[str, Forecast | ForecastError]]] | None = None
        self._chooser = AutoChooser()

    def close(self) -> None:
        self._executor.shutdown(wait=False, cancel_futures=True)

    def run(self, now: float) -> CycleReport:
        started = time.monotonic()
        subjects = self.gather(now)
        if not subjects:
            return CycleReport(0, 0, time.monotonic() - started, skipped="no rolled-up history yet")
        if self._running is not None and not self._running.done():
            self._fail_all(subjects, "the previous forecast cycle is still running", now)
            return CycleReport(0, len(subjects), time.monotonic() - started, skipped="previous cycle still running")
        step = inputs.STEP_SECONDS
        h = horizon_steps(self.settings.horizon_seconds, step)
        self._running = self._executor.submit(self._cycles, self._plan(subjects), h)
        try:
            by_model = self._running.result(timeout=self.settings.timeout_seconds)
        except FutureTimeout:
            self._fail_all(subjects, f"forecast cycle timed out after {self.settings.timeout_seconds:g} s", now)
            return CycleReport(0, len(subjects), time.monotonic() - started)
        chosen = self._chosen(subjects, by_model)
        results = {_key_name(k): c.outcome for k, c in chosen.items()}
        forecasts = {k: r for k in subjects if isinstance(r := results.get(_key_name(k)), Forecast)}
        good = self.skipped.each(
            forecasts.items(),
            lambda kf: f"{kf[0][0].value} {kf[0][1]}",
            lambda kf: self._good(kf[0], subjects[kf[0]], kf[1], now, chosen[kf[0]]),
        )
        failures = [
            (*key, str(results.get(_key_name(key), "no forecast returned"))) for key in subjects if key not in forecasts
        ]
        self.store.save(good)
        self._score(subjects, good, now)
        short = {key for key in subjects if isinstance(results.get(_key_name(key)), NotEnoughHistory)}
        self.store.mark_failed(failures, attempted_at=now, short_history=short)
        report = CycleReport(len(good), len(failures), time.monotonic() - started)
        self._export(good, failures, report, now)
        return report

    def _plan(self, subjects: Mapping[Key, Subject]) -> dict[str, dict[str, History]]:
        """Which model forecasts which histories this cycle: the configured model everything, or, for ``auto``,
        both candidates the pools and the smoothing family every other subject."""
        histories = {_key_name(k): s.history for k, s in subjects.items()}
        if self.settings.model != DEFAULT_MODEL:
            return {self.settings.model: histories}
        pools = {_key_name(k): s.history for k, s in subjects.items() if k[0] is SubjectKind.POOL}
        return {PRIOR: pools, OTHER_SUBJECTS_MODEL: histories}

    def _cycles(
        self, plan: Mapping[str, Mapping[str, History]], h: int
    ) -> dict[str, Mapping[str, Forecast | ForecastError]]:
        return {model: self.cycle(histories, h, model) for model, histories in plan.items() if histories}

    def _chosen(
        self, subjects: Mapping[Key, Subject], by_model: Mapping[str, Mapping[str, Forecast | ForecastError]]
    ) -> dict[Key, Choice]:
        """Each subject's outcome and what made it: ``auto``'s choice for a pool, else the one model's."""
        missing = ForecastError("no forecast returned")
        out = {}
        for key, subject in subjects.items():
            name = _key_name(key)
            if self.settings.model != DEFAULT_MODEL or subject.decision is None:
                model = self.settings.model if self.settings.model != DEFAULT_MODEL else OTHER_SUBJECTS_MODEL
                out[key] = Choice(by_model.get(model, {}).get(name, missing), model, None)
                continue
            candidates = {c: by_model.get(c, {}).get(name, missing) for c in CANDIDATES}
            out[key] = self._chooser.choose(key[1], subject.decision, subject.history, candidates)
        self._chooser.forget({k[1] for k, s in subjects.items() if s.decision is not None})
        return out

    def _score(self, subjects: Mapping[Key, Subject], good: list[GoodForecast], now: float) -> None:
        """Keep the pools' new forecasts, score the kept ones whose targets have come against the histories just
        read, and store each pool's windows of accuracy (``predictor.accuracy_store``)."""
        pools = [g for g in good if g.kind is SubjectKind.POOL]
        histories = {(k.value, name, m): s.history for (k, name, m), s in subjects.items() if k is SubjectKind.POOL}
        if not pools:
            return
        with self.engine.begin() as conn:
            accuracy_store.keep(conn, pools)
            accuracy_store.score_due(conn, histories)
            for g in pools:
                scored = accuracy_store.accuracy(conn, (g.kind.value, g.subject, g.metric), now=now)
                self.store.set_accuracy(conn, g.kind, g.subject, g.metric, scored)
            accuracy_store.forget_before(conn, now - max(WINDOWS_SECONDS.values()) - self.settings.horizon_seconds)

    def gather(self, now: float) -> dict[Key, Subject]:
        """Every subject with its history and capacity, read in one connection."""
        s = self.settings
        subjects: dict[Key, Subject] = {}
        with self.engine.connect() as conn:
            pool_window = inputs.rollup_window(conn, now=now, history_seconds=s.pool_history_seconds)
            if pool_window is None:
                return subjects
            configured = {p.name: p for p in self.pools.list()}
            replicas = self.fleet.read_with(conn, now).ready_replicas()
            names = sorted(set(configured) | inputs.pools_seen(conn, pool_window))
            subjects.update(
                self.skipped.each(
                    names,
                    lambda name: f"pool {name}",
                    lambda name: self._pool_subject(conn, name, configured.get(name), replicas, pool_window, now),
                )
            )
            node_window = inputs.Window(
                max(pool_window.start, pool_window.end - s.node_history_seconds), pool_window.end
            )
            for (node_id, device), (history, total) in inputs.device_memory(conn, node_window).items():
                context = {"memory_total_bytes": total, "exhaustion_ratio": s.exhaustion_ratio}
                key = (SubjectKind.DEVICE, f"{node_id}/{device}", "gpu_memory_used_bytes")
                subjects[key] = Subject(history, s.exhaustion_ratio * total, context=context)
            for (node_id, pool), history in inputs.replica_kv_cache(conn, node_window).items():
                key = (SubjectKind.REPLICAS, f"{node_id}/{pool}", "kv_cache_utilization_ratio")
                subjects[key] = Subject(history, s.exhaustion_ratio, context={"exhaustion_ratio": s.exhaustion_ratio})
        return subjects

    def _pool_subject(
        self, conn: Any, name: str, pool: Pool | None, replicas: Mapping[str, int], window: inputs.Window, now: float
    ) -> tuple[Key, Subject]:
        """A pool's demand history and capacity: its ready replicas times what one replica serves."""
        spec = pool.spec if pool is not None else PoolSpec()
        metric = spec.demand_metric.value
        history = inputs.pool_demand(conn, name, metric, window)
        learned = self._learned(conn, name, spec, now) if spec.replica_capacity is None else None
        per_replica = replica_capacity(
            spec.replica_capacity, lambda: learned if isinstance(learned, ReplicaCapacity) else None
        )
        missing = learned.reason if isinstance(learned, NoCapacity) else None
        capacity = PoolCapacity(replicas.get(name, 0), per_replica, missing)
        decision = decision_point(spec.slo_attainment, spec.startup_seconds, history.step_seconds)
        return (SubjectKind.POOL, name, metric), Subject(history, capacity.total, pool=capacity, decision=decision)

    def _learned(self, conn: Any, name: str, spec: PoolSpec, now: float) -> ReplicaCapacity | NoCapacity:
        """The per-replica capacity learned from the pool's raw samples (cached ``capacity_refresh_seconds``), or
        why there is none (tried again next cycle: a pool just adopted gets its capacity as soon as its replicas
        have shown enough, not ten minutes later)."""
        cached = self._capacity.learned.get(name)
        if (
            cached is None
            or now - cached[0] >= self.settings.capacity_refresh_seconds
            or isinstance(cached[1], NoCapacity)
        ):
            observations = inputs.replica_observations(
                conn, name, spec.demand_metric.value, start=now - self.settings.capacity_window_seconds, end=now
            )
            learned = learn_capacity(observations, spec.slo_p99_seconds)
            found = learned if isinstance(learned, NoCapacity) else ReplicaCapacity(learned.per_replica, learned.source)
            cached = (now, found)
            self._capacity.learned[name] = cached
        return cached[1]

    def _good(self, key: Key, subject: Subject, forecast: Forecast, now: float, choice: Choice) -> GoodForecast:
        history, step = subject.history, subject.history.step_seconds
        origin = history.end_ts
        forecast = non_negative(forecast)
        quantiles = forecast.quantiles.tolist() if forecast.quantiles is not None else [[]] * forecast.horizon
        points = [
            ForecastPoint(
                origin + (k + 1) * step,
                float(forecast.yhat[k]),
                float(forecast.lo[k]),
                float(forecast.hi[k]),
                tuple(quantiles[k]),
            )
            for k in range(forecast.horizon)
        ]
        state: dict[str, Any] = {
            "probability": None,
            "eta_seconds": None,
            "capacity": None,
            **(subject.pool.as_json() if subject.pool is not None else subject.context),
        }
        if subject.capacity is not None and math.isfinite(subject.capacity) and subject.capacity > 0:
            estimate = saturation(forecast, subject.capacity, step)
            state.update(probability=estimate.probability, eta_seconds=estimate.eta_seconds, capacity=subject.capacity)
        return GoodForecast(
            kind=key[0],
            subject=key[1],
            metric=key[2],
            generated_at=now,
            model=choice.model if choice.selection is None else f"{DEFAULT_MODEL}[{choice.model}]",
            origin_ts=origin,
            step_seconds=step,
            horizon_seconds=forecast.horizon * step,
            input_start=history.start_ts,
            input_end=origin + step,
            points=points,
            saturation=state,
            levels=forecast.levels,
            selection=choice.selection,
        )

    def _fail_all(self, subjects: dict[Key, Subject], reason: str, now: float) -> None:
        log.warning("forecast: %s; %d forecasts marked stale", reason, len(subjects))
        self.store.mark_failed([(*key, reason) for key in subjects], attempted_at=now)
        if self.telemetry is not None:
            for key in subjects:
                self.telemetry.forecasts.labels(key[0].value, "failed").inc()

    def _export(
        self,
        good: list[GoodForecast],
        failures: list[tuple[SubjectKind, str, str, str]],
        report: CycleReport,
        now: float,
    ) -> None:
        if failures:
            _kind, subject, _metric, error = failures[0]
            log.warning(
                "forecast: %d of %d failed, e.g. %s: %s", len(failures), len(failures) + len(good), subject, error
            )
        if self.telemetry is None:
            return
        t = self.telemetry
        t.cycle_seconds.set(report.seconds)
        if good:
            t.last_success.set(now)
        for g in good:
            t.forecasts.labels(g.kind.value, "ok").inc()
            if g.kind is SubjectKind.POOL and g.saturation is not None and g.saturation["probability"] is not None:
                t.set_saturation(g.subject, g.saturation["probability"], g.saturation["eta_seconds"])
        for kind, *_ in failures:
            t.forecasts.labels(kind.value, "failed").inc()

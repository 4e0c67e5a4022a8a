"""The evaluator's inputs, read from storage: only what the enabled rules need, so a 1-second cadence stays cheap.

- the latest reading of every series (``series_latest``), with the agent's alertable extras and the error ratio;
- each node's ``last_seen`` (server clock) and whether it is up, by the fleet's one threshold (:mod:`fleet.view`);
- per windowed rule: a statistic over the window's 1-minute rollups, or the change of a metric over the window
  (the latest value minus the first sample in the window's first ``EDGE_SECONDS``; a counter that went down, a
  reset, counts from zero);
- forecasts' saturation and errors; pools' desired and ready replicas and last failed actuation; throttles.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection, Row, func, select

from alerting.inputs import ForecastView, Inputs, PoolScaling, Reading, Throttle
from alerting.latest_readings import LatestReadings
from alerting.rules import EventKind, Rule, RuleKind
from alerting.signals import is_catalog_metric, reading_values
from collector.aggregate import Stat, reduce_rollups
from collector.registry import NodeStatus
from collector.skipped_rows import Job, SkippedRows
from collector.tables import NO_DEVICE, NO_POOL, ROLLUP_BUCKET_SECONDS, nodes, rollup_column, rollups_1m, samples
from fleet.pools import applies_desired, pools
from fleet.scaling_log import Outcome, scaling_events
from fleet.view import FleetReader
from isolation.events import enforcement_events
from predictor.store import forecasts, warming_up

EDGE_SECONDS = 120.0  # how far into a rate-of-change window its first sample is looked for
SeriesKey = tuple[str, int | None, str | None]  # node, device, pool


@dataclass(frozen=True)
class Needs:
    readings: bool
    forecasts: bool
    pools: bool
    throttle_window_seconds: float | None
    failure_window_seconds: float | None


def needs(rules: Sequence[Rule]) -> Needs:
    kinds = {r.spec.kind for r in rules}
    events = {r.spec.event: r.spec.window_seconds or 0.0 for r in rules if r.spec.kind is RuleKind.EVENT}
    scaling = {EventKind.SCALING_FAILED, EventKind.SCALING_STUCK} & events.keys()
    return Needs(
        readings=bool(kinds & {RuleKind.THRESHOLD, RuleKind.RATE_OF_CHANGE, RuleKind.ABSENT}),
        forecasts=RuleKind.PREDICTIVE in kinds or EventKind.FORECAST_FAILING in events,
        pools=bool(scaling),
        throttle_window_seconds=events.get(EventKind.QUOTA_ENFORCED),
        failure_window_seconds=events.get(EventKind.SCALING_FAILED),
    )


def gather(
    conn: Connection,
    rules: Sequence[Rule],
    now: float,
    *,
    fleet: FleetReader,
    fresh_seconds: float,
    edges: WindowEdges | None = None,
    skipped: SkippedRows | None = None,
    latest: LatestReadings | None = None,
) -> Inputs:
    """The inputs of ``rules`` at ``now``; ``edges`` (kept by the evaluator between ticks) spares rate-of-change
    rules their raw-sample read on most ticks, and a series whose figures cannot be read is left out to ``skipped``."""
    want = needs(rules)
    edges = edges if edges is not None else WindowEdges()
    edges.keep_only(rules)
    skipped = skipped if skipped is not None else SkippedRows(Job.ALERTS)
    latest = latest if latest is not None else LatestReadings()
    readings = latest.read(conn, now, skipped) if want.readings else []
    last_seen = {r.id: r.last_seen for r in conn.execute(select(nodes.c.id, nodes.c.last_seen))}
    up = frozenset(n for n, status in fleet.statuses(conn, now).items() if status is NodeStatus.UP)
    windowed = {}
    for rule in rules:
        if rule.spec.kind is RuleKind.RATE_OF_CHANGE:
            windowed[rule.id] = _changes(edges.first_values(conn, rule, now, skipped), rule, readings)
        elif rule.spec.stat is not None:
            windowed[rule.id] = _rollup_stats(conn, rule, now, up, fresh_seconds, skipped)
    return Inputs(
        readings=readings,
        node_last_seen=last_seen,
        up_nodes=up,
        windowed=windowed,
        forecasts=_forecasts(conn) if want.forecasts else (),
        pools=_pools(conn, fleet, now, want.failure_window_seconds) if want.pools else (),
        throttles=_throttles(conn, now, want.throttle_window_seconds) if want.throttle_window_seconds else (),
        slo_p99_seconds=_slos(conn) if any(r.spec.slo_ratio is not None for r in rules) else {},
        fresh_seconds=fresh_seconds,
    )


def _slos(conn: Connection) -> dict[str, float]:
    """Each pool's latency SLO, for the rules whose threshold is a share of it."""
    return {r.name: float(r.slo_p99_seconds) for r in conn.execute(select(pools.c.name, pools.c.slo_p99_seconds))}


def _where(key: SeriesKey) -> str:
    node, device, pool = key
    return f"node {node} device {device} pool {pool}"


def _key(node: str, device: int, pool: str) -> SeriesKey:
    return node, None if device == NO_DEVICE else device, None if pool == NO_POOL else pool


def _rollup_stats(
    conn: Connection, rule: Rule, now: float, up: frozenset[str], fresh_seconds: float, skipped: SkippedRows
) -> list[Reading]:
    """The rule's statistic per series over the window's minutes; a series of a node that is down is stale."""
    spec = rule.spec
    assert spec.metric is not None and spec.stat is not None and spec.window_seconds is not None
    column = rollups_1m.c[rollup_column(spec.metric, spec.stat.value)]
    query = select(rollups_1m.c.node_id, rollups_1m.c.device, rollups_1m.c.pool, rollups_1m.c.bucket, column).where(
        rollups_1m.c.bucket >= now - spec.window_seconds, column.is_not(None)
    )
    values: dict[SeriesKey, list[float]] = defaultdict(list)
    for row in conn.execute(query):
        values[_key(row[0], row[1], row[2])].append(float(row[4]))
    metric, stat = spec.metric, Stat(spec.stat)

    def reading(item: tuple[SeriesKey, list[float]]) -> Reading:
        (node, device, pool), found = item
        ts = now if node in up else now - fresh_seconds - ROLLUP_BUCKET_SECONDS
        return Reading(node, device, pool, ts, {metric: reduce_rollups(found, stat)})

    return skipped.each(values.items(), lambda item: _where(item[0]), reading)


class WindowEdges:
    """Each rate-of-change rule's first values near its window start, re-read at most every ``window / 60`` seconds
    instead of every tick: a 1-hour window's start then drifts up to 60 s (1.7 % of the window), and its raw-sample
    read (every series' first ``EDGE_SECONDS`` of samples) runs once a minute, not once a second — at 150 nodes × 10
    series at 2 Hz that read is ~360,000 rows. Keyed by rule id and version, so an edited rule reads afresh."""

    def __init__(self) -> None:
        self._cache: dict[tuple[int, int], tuple[float, dict[SeriesKey, float]]] = {}

    def first_values(self, conn: Connection, rule: Rule, now: float, skipped: SkippedRows) -> dict[SeriesKey, float]:
        assert rule.spec.window_seconds is not None
        key = (rule.id, rule.version)
        cached = self._cache.get(key)
        if cached is not None and 0 <= now - cached[0] < max(1.0, rule.spec.window_seconds / 60):
            return cached[1]
        first = _first_values(conn, rule, now, skipped)
        self._cache[key] = (now, first)
        return first

    def keep_only(self, rules: Sequence[Rule]) -> None:
        """Forget rules deleted, disabled or edited since."""
        live = {(r.id, r.version) for r in rules}
        self._cache = {k: v for k, v in self._cache.items() if k in live}


def _first_values(conn: Connection, rule: Rule, now: float, skipped: SkippedRows) -> dict[SeriesKey, float]:
    spec = rule.spec
    assert spec.metric is not None and spec.window_seconds is not None
    start = now - spec.window_seconds
    catalog = is_catalog_metric(spec.metric)
    value_column = samples.c[spec.metric] if catalog else samples.c.extra
    query = (
        select(samples.c.node_id, samples.c.device, samples.c.pool, value_column)
        .where(samples.c.ts >= start, samples.c.ts <= start + min(EDGE_SECONDS, spec.window_seconds / 2))
        .order_by(samples.c.ts)
    )
    metric = spec.metric

    def keyed(row: Row[Any, Any, Any, Any]) -> tuple[SeriesKey, float | None]:
        value = row[3] if catalog else reading_values({}, row[3]).get(metric)
        return _key(row[0], row[1], row[2]), None if value is None else float(value)

    first: dict[SeriesKey, float] = {}
    for key, value in skipped.each(conn.execute(query), lambda row: _where(_key(row[0], row[1], row[2])), keyed):
        if key not in first and value is not None:
            first[key] = value
    return first


def _changes(first: dict[SeriesKey, float], rule: Rule, readings: Sequence[Reading]) -> list[Reading]:
    metric = rule.spec.metric
    assert metric is not None
    out = []
    for r in readings:
        begin, latest = first.get((r.node, r.device, r.pool)), r.values.get(metric)
        if begin is not None and latest is not None:
            change = latest - begin if latest >= begin else latest  # went down: a reset, counted from zero
            out.append(Reading(r.node, r.device, r.pool, r.ts, {metric: change}))
    return out


def _forecasts(conn: Connection) -> list[ForecastView]:
    out = []
    for row in conn.execute(select(forecasts)).mappings():
        saturation = row["saturation"] or {}
        probability = saturation.get("probability")
        eta = saturation.get("eta_seconds")
        out.append(
            ForecastView(
                kind=row["kind"],
                subject=row["subject"],
                metric=row["metric"],
                probability=float(probability) if isinstance(probability, int | float) else None,
                eta_seconds=float(eta) if isinstance(eta, int | float) else None,
                horizon_seconds=row["horizon_seconds"],
                error=row["error"],
                warming_up=warming_up(row["error"], row["short_history"], row["generated_at"]),
            )
        )
    return out


def _pools(conn: Connection, fleet: FleetReader, now: float, failure_window: float | None) -> list[PoolScaling]:
    ready: dict[str, int] = defaultdict(int)
    for on in fleet.pools_on_nodes(conn, now):
        ready[on.pool] += on.ready
    failed: dict[str, float] = {}
    if failure_window:
        query = (
            select(scaling_events.c.pool, func.max(scaling_events.c.ts))
            .where(scaling_events.c.outcome == Outcome.FAILED, scaling_events.c.ts >= now - failure_window)
            .group_by(scaling_events.c.pool)
        )
        failed = {row[0]: float(row[1]) for row in conn.execute(query)}
    p = pools.c
    rows = conn.execute(select(p.name, p.desired_replicas, p.mode, p.scaled_by).order_by(p.name))
    return [
        PoolScaling(
            r.name,
            r.desired_replicas,
            ready.get(r.name, 0),
            failed.get(r.name),
            applied=applies_desired(r.mode, r.scaled_by),
        )
        for r in rows
    ]


def _throttles(conn: Connection, now: float, window: float) -> list[Throttle]:
    c = enforcement_events.c
    query = select(c.tenant, c.node, c.pool, c.ts, c.message).where(c.kind == "throttle", c.ts >= now - window)
    return [Throttle(r.tenant, r.node, r.pool, r.ts, r.message) for r in conn.execute(query)]

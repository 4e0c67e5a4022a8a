"""The built-in workload's serving metrics: each pool's ready replicas' ``/stats`` combined into one pool reading.

Per pool (CONTRACT section 4): request arrivals and generated tokens per second (counter deltas over the last
``RATE_WINDOW_S``, from the oldest read kept, so the first read has no rates), requests waiting (in the replicas'
engines plus the front end's queue), p99 end-to-end latency over every replica's trailing 10 s, and KV blocks used
over blocks available (absent for classify pools, which have no KV cache). A replica that does not answer puts an
error on the reading; the figures then cover the replicas that did.

A replica counts toward a rate once the read a rate is measured from has it (same ``instance``): a replica new since
then (just warm, its counters holding the warm-up) or restarted since (a new instance, counters reset) gives no delta
yet, so neither warm-up tokens nor a counter reset ever distort a rate.

Rates over a window, not over the 0.5 s since the previous read: a replica getting a request every 3 s read 0 or
2 requests/s every half second, so a pool of three such replicas at 1 request/s read up to 6, and the autoscaler
deciding on the latest reading scaled up on every coincidence and never agreed on a scale-down.

Per tenant (the replicas' ``tenants`` in ``/stats``), the same figures as ``wire.control.TenantUsage``
(requests and tokens per second, p99 latency, KV blocks held), each left out where nothing measured it (no comparable
previous read, no finished request in the window, a classify pool): not in the reading, which carries only alertable
figures, but in ``tenant_usage()``, which the node's report takes when it is sent. The pool's replica counts are the
supervisor's (``Supervisor.replica_counts``); the reading keeps only ``replica_consecutive_crashes``, which alert
rules watch (``alerting.signals``).
"""

from __future__ import annotations

import re
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import httpx
from pydantic import ValidationError

from inference_agent.probes.base import Reading
from inference_agent.serving.routing import PoolRoutes
from wire.control import NAME_PATTERN, TenantUsage
from wire.percentile import percentile

_TENANT_NAME = re.compile(NAME_PATTERN)


@dataclass(frozen=True)
class _Counts:
    instance: str
    arrived: int
    generated_tokens: int
    tenants: Mapping[str, tuple[int, int]]  # tenant → (arrived, generated tokens)


RATE_WINDOW_S = 10.0  # what rates are measured over, as an engine's scraped counters are (probes.engines)


@dataclass(frozen=True)
class _PoolRead:
    at: float  # monotonic
    counts: Mapping[str, _Counts]  # by replica id


class BuiltinEngineProbe:
    name = "builtin"

    def __init__(
        self,
        routes: Callable[[], Mapping[str, PoolRoutes]],
        *,
        queued: Callable[[str], int] = lambda _pool: 0,
        client: httpx.Client | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._routes = routes
        self._queued = queued
        self._client = client or httpx.Client(timeout=httpx.Timeout(1.0, connect=0.3))
        self._clock = clock
        self._reads: dict[str, deque[_PoolRead]] = {}  # per pool, the reads of the last RATE_WINDOW_S, oldest first
        self._usage: tuple[float, dict[str, dict[str, TenantUsage]]] | None = None  # (read at, by pool and tenant)

    def read(self) -> list[Reading]:
        usage: dict[str, dict[str, TenantUsage]] = {}
        readings = [self._read_pool(name, routes, usage) for name, routes in sorted(self._routes().items())]
        self._usage = (self._clock(), usage)
        return readings

    def tenant_usage(self, max_age_s: float) -> dict[str, dict[str, TenantUsage]]:
        """Each pool's tenants' usage as of the latest read, none when that is older than ``max_age_s`` (a stuck
        probe's figures are not passed off as the node's current usage)."""
        latest = self._usage
        if latest is None or self._clock() - latest[0] > max_age_s:
            return {}
        return latest[1]

    def _read_pool(self, pool: str, routes: PoolRoutes, usage: dict[str, dict[str, TenantUsage]]) -> Reading:
        now = self._clock()
        stats: dict[str, dict[str, Any]] = {}
        errors: list[str] = []
        for endpoint in routes.ready:
            try:
                answer = self._client.get(f"{endpoint.url}/stats", headers=endpoint.auth_headers)
                answer.raise_for_status()
                stats[endpoint.replica_id] = answer.json()
            except (httpx.HTTPError, ValueError) as exc:
                errors.append(f"replica {endpoint.replica_id}: {type(exc).__name__}: {exc}")
        counts = {rid: _counts(s) for rid, s in stats.items()}
        metrics = _gauges(routes.kind, stats.values(), self._queued(pool))
        reads = self._reads.setdefault(pool, deque())
        while len(reads) > 1 and reads[1].at <= now - RATE_WINDOW_S:
            reads.popleft()  # the oldest kept is the last read at or before the window's start
        earlier = tuple(reads) if reads and now > reads[0].at else None
        if earlier is not None:
            metrics.update(_rates(routes.kind, earlier, counts, now))
        reads.append(_PoolRead(now, counts))
        extra: dict[str, Any] = {"replica_consecutive_crashes": routes.consecutive_crashes}
        extra.update(_extras(stats.values()))
        usage[pool] = _tenant_usage(routes.kind, stats.values(), earlier, counts, now)
        return Reading(metrics, pool=pool, extra=extra, error="; ".join(errors) or None)

    def close(self) -> None:
        self._client.close()


def _counts(stats: Mapping[str, Any]) -> _Counts:
    engine = stats.get("engine") or {}
    tenants = {
        name: (int(t["arrived"]), int(t.get("generated_tokens", 0))) for name, t in (stats.get("tenants") or {}).items()
    }
    return _Counts(
        str(stats["instance"]), int(stats["requests"]["arrived"]), int(engine.get("generated_tokens", 0)), tenants
    )


def _gauges(kind: str, stats: Any, queued: int) -> dict[str, float]:
    stats = list(stats)
    metrics: dict[str, float] = {}
    engines = [s["engine"] for s in stats if s.get("engine")]
    if stats:
        metrics["queue_depth_requests"] = float(sum(e["waiting"] for e in engines) + queued)
    latencies = [x for s in stats for x in s["latency"]["samples_seconds"]]
    if latencies:
        metrics["request_latency_p99_seconds"] = percentile(latencies, 99.0)
    total = sum(e["kv_blocks_total"] for e in engines)
    if kind == "text" and total > 0:
        metrics["kv_cache_utilization_ratio"] = min(1.0, sum(e["kv_blocks_used"] for e in engines) / total)
    return metrics


def _baseline(earlier: tuple[_PoolRead, ...], rid: str, current: _Counts) -> tuple[_Counts, float] | None:
    """The oldest of the ``earlier`` reads that has this replica's current instance: its counts then, and when."""
    for read in earlier:
        before = read.counts.get(rid)
        if before is not None and before.instance == current.instance:
            return before, read.at
    return None


def _rates(kind: str, earlier: tuple[_PoolRead, ...], counts: Mapping[str, _Counts], now: float) -> dict[str, float]:
    """Per-second increases, each replica's since its oldest comparable read; worked: 40 arrivals in 0.5 s → 80
    requests/s."""
    arrived = tokens = 0.0
    for rid, current in counts.items():
        found = _baseline(earlier, rid, current)
        if found is not None:
            before, at = found
            arrived += max(0, current.arrived - before.arrived) / (now - at)
            tokens += max(0, current.generated_tokens - before.generated_tokens) / (now - at)
    rates = {"request_rate_per_second": arrived}
    if kind == "text":
        rates["token_throughput_per_second"] = tokens
    return rates


def _extras(stats: Any) -> dict[str, float]:
    engines = [s["engine"] for s in stats if s.get("engine")]
    if not engines:
        return {}
    extras = {
        "requests_running": float(sum(e["running"] for e in engines)),
        "kv_swaps_out": float(sum(e["swaps_out"] for e in engines)),
        "kv_swaps_in": float(sum(e["swaps_in"] for e in engines)),
    }
    paged = [e for e in engines if e["kv_blocks_total"]]
    if paged:  # the worst replica's share of allocated KV slots left empty; absent for engines without a KV cache
        extras["kv_fragmentation_ratio"] = max(float(e["kv_fragmentation_ratio"]) for e in paged)
    return extras


def _tenant_usage(
    kind: str, stats: Any, earlier: tuple[_PoolRead, ...] | None, counts: Mapping[str, _Counts], now: float
) -> dict[str, TenantUsage]:
    """Each tenant's rates (deltas over replicas comparable with an earlier read), p99 and KV blocks in use; a name
    the wire would refuse (never one the front end gives) is left out rather than sink the node's report."""
    by_replica = [s.get("tenants") or {} for s in stats]
    out: dict[str, TenantUsage] = {}
    for name in sorted({name for tenants in by_replica for name in tenants}):
        mine = [tenants[name] for tenants in by_replica if name in tenants]
        figures = _tenant_rates(kind, name, earlier, counts, now) if earlier is not None else {}
        latencies = [x for t in mine for x in t.get("latency_samples_seconds", [])]
        if latencies:
            figures["latency_p99_seconds"] = percentile(latencies, 99.0)
        blocks = [float(t["kv_blocks"]) for t in mine if "kv_blocks" in t]
        if kind == "text" and blocks:
            figures["kv_blocks"] = sum(blocks)
        if figures and _TENANT_NAME.match(name):
            try:
                out[name] = TenantUsage(**figures)
            except ValidationError:
                continue
    return out


def _tenant_rates(
    kind: str, tenant: str, earlier: tuple[_PoolRead, ...], counts: Mapping[str, _Counts], now: float
) -> dict[str, float]:
    """A tenant's per-second increases; a tenant new on a replica seen before started from 0 there."""
    arrived = tokens = 0.0
    compared = 0
    for rid, current in counts.items():
        found = _baseline(earlier, rid, current) if tenant in current.tenants else None
        if found is None:
            continue
        before, at = found
        then = before.tenants.get(tenant, (0, 0))
        arrived += max(0, current.tenants[tenant][0] - then[0]) / (now - at)
        tokens += max(0, current.tenants[tenant][1] - then[1]) / (now - at)
        compared += 1
    if not compared:
        return {}
    rates = {"requests_per_second": arrived}
    if kind == "text":
        rates["tokens_per_second"] = tokens
    return rates

"""The engine-profile replicas' own metrics: each ready replica's endpoint read through its engine's adapter
(``probes.engines``), the replicas of a pool combined into the pool's reading.

A pool's replicas add up the way the fleet's do (CONTRACT section 6, "without node"): rates, queues and throughput
are summed; latency and KV-cache use are the worst replica's, so one full replica is not averaged away by idle ones.
The front end's own queue for the pool counts as waiting too. Each replica's own queue, as last read, is what the
front end's dispatcher adds to what it has in flight there (``waiting``). A replica's adapter lives as long as it is
ready (its rates need the previous scrape), and is dropped with it.

Worked: replicas a (8 req/s, queue 3, p99 1.2 s, KV 0.9) and b (6 req/s, queue 0, p99 0.4 s, KV 0.2), 2 waiting in
the front end → 14 req/s, queue 5, p99 1.2 s, KV 0.9.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Protocol

from inference_agent.probes.base import Reading
from inference_agent.probes.engines import EngineScrapeProbe
from inference_agent.probes.exposition_fetch import Fetch
from inference_agent.serving.routing import PoolRoutes

WORST_OF = frozenset({"request_latency_p99_seconds", "kv_cache_utilization_ratio"})


def combine(pool: str, readings: Sequence[Reading], *, queued: int = 0) -> Reading:
    """One pool reading from its replicas' (module docstring): a metric only where some replica measured it. Extras
    add up alike: a rate (``…_per_second``) or a count of requests (``requests_…``) is summed, any other the
    largest replica's (a fragmentation ratio, the fullest engine's queue)."""
    metrics: dict[str, float] = {}
    for name in sorted({n for r in readings for n in r.metrics}):
        values = [r.metrics[name] for r in readings if name in r.metrics]
        metrics[name] = max(values) if name in WORST_OF else math.fsum(values)
    if "queue_depth_requests" in metrics or queued:
        metrics["queue_depth_requests"] = metrics.get("queue_depth_requests", 0.0) + queued
    extra: dict[str, float] = {}
    for name in sorted({n for r in readings for n in r.extra}):
        values = [float(r.extra[name]) for r in readings if isinstance(r.extra.get(name), int | float)]
        if values:
            extra[name] = (
                math.fsum(values) if name.endswith("_per_second") or name.startswith("requests_") else max(values)
            )
    errors = [r.error for r in readings if r.error]
    return Reading(metrics, pool=pool, extra=extra, error="; ".join(errors) or None)


class EngineWatch(Protocol):
    """Who serves each adapter's absent metrics with their reasons (``AgentTelemetry``)."""

    def watch_engine(self, probe: EngineScrapeProbe) -> None: ...

    def unwatch_engine(self, probe: EngineScrapeProbe) -> None: ...


class EngineQueues:
    """Requests waiting in each engine-profile replica's own engine (replica id → count), as the engine probe last read
    them: the probe records them, the front end's dispatcher reads them (``dispatch.Waiting``) and never scrapes."""

    def __init__(self) -> None:
        self._waiting: dict[str, int] = {}

    def waiting(self, replica_id: str) -> int:
        """Requests waiting in the replica's own engine as last read (0 when unknown)."""
        return self._waiting.get(replica_id, 0)

    def record(self, replica_id: str, waiting: int) -> None:
        self._waiting[replica_id] = waiting

    def forget(self, replica_id: str) -> None:
        self._waiting.pop(replica_id, None)


class EngineReplicasProbe:
    """Reads every ready engine-profile replica whose profile names a metrics kind (a ``Probe``)."""

    name = "engine-replicas"

    def __init__(
        self,
        routes: Callable[[], Mapping[str, PoolRoutes]],
        *,
        queued: Callable[[str], int] = lambda _pool: 0,
        queues: EngineQueues | None = None,
        fetch: Fetch | None = None,
        clock: Callable[[], float] = time.monotonic,
        watch: EngineWatch | None = None,
    ) -> None:
        """``queued``: pool → requests waiting in the front end for it; ``queues``: where each replica's own queue
        is recorded as read (by default a store of its own)."""
        self._routes = routes
        self._watch = watch
        self._queued = queued
        self.queues = queues or EngineQueues()
        self._fetch = fetch
        self._clock = clock
        self._adapters: dict[str, EngineScrapeProbe] = {}  # by replica id

    def read(self) -> list[Reading]:
        readings: list[Reading] = []
        seen: set[str] = set()
        for pool, routes in sorted(self._routes().items()):
            if routes.engine is None or routes.metrics_kind is None or routes.metrics_path is None:
                continue
            mine = []
            for endpoint in routes.ready:
                seen.add(endpoint.replica_id)
                adapter = self._adapters.get(endpoint.replica_id)
                if adapter is None:
                    url = f"{endpoint.url}{routes.metrics_path}"
                    adapter = EngineScrapeProbe(routes.metrics_kind, url, pool, fetch=self._fetch, clock=self._clock)
                    self._adapters[endpoint.replica_id] = adapter
                    if self._watch is not None:
                        self._watch.watch_engine(adapter)
                reading = adapter.read()[0]
                waiting = reading.metrics.get("queue_depth_requests")
                self.queues.record(endpoint.replica_id, int(waiting) if waiting is not None else 0)
                mine.append(reading)
            combined = combine(pool, mine, queued=self._queued(pool))
            crashes = {"replica_consecutive_crashes": routes.consecutive_crashes}
            readings.append(replace(combined, extra={**combined.extra, **crashes}))
        for gone in set(self._adapters) - seen:
            self._drop(gone)
        return readings

    def _drop(self, replica_id: str) -> None:
        adapter = self._adapters.pop(replica_id)
        if self._watch is not None:
            self._watch.unwatch_engine(adapter)
        adapter.close()
        self.queues.forget(replica_id)

    def close(self) -> None:
        for replica_id in list(self._adapters):
            self._drop(replica_id)

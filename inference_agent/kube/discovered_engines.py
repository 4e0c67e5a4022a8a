"""The engines found in this node's pods, read as the agent reads any ``--engine POOL=KIND=URL``: one
``EngineScrapeProbe`` per pod, each on its own ``BackgroundProbe`` thread, added and closed as pods come and go.

One pool is read from one engine per node (the series key is node, device, pool): a second pod of a pool (the newer
of the two), or one of a pool an ``--engine`` names, is skipped with one log line.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Collection, Mapping
from dataclasses import replace

from inference_agent.kube.annotations import PodEngine
from inference_agent.kube.pod_watch import PodWatch
from inference_agent.probes.base import Reading
from inference_agent.probes.engines import EngineScrapeProbe
from inference_agent.sampler import BackgroundProbe
from inference_agent.telemetry import EngineAbsences

log = logging.getLogger(__name__)


def choose_engines(
    found: Mapping[str, PodEngine], reserved_pools: Collection[str]
) -> tuple[dict[str, PodEngine], dict[str, str]]:
    """The pods to read, by ``namespace/name``, and why each other one is not: the oldest pod of a pool wins, then
    the first by name (chat: ns/b created 08:00 and ns/a 12:00 → ns/b read, ns/a skipped: a pod started later, of
    any name, never takes a pool from the one read), and a pool given by a flag or the config is theirs."""
    chosen: dict[str, PodEngine] = {}
    skipped: dict[str, str] = {}
    by_pool: dict[str, str] = {}
    # a pod without a creation time (none from a real API server) counts as the newest: "~" sorts after digits
    for key, engine in sorted(found.items(), key=lambda item: (item[1].created or "~", item[0])):
        if engine.pool in reserved_pools:
            skipped[key] = f"pool {engine.pool} is read from the engine --engine/--config names"
        elif engine.pool in by_pool:
            skipped[key] = f"pool {engine.pool} is read from pod {by_pool[engine.pool]} already"
        else:
            chosen[key] = engine
            by_pool[engine.pool] = key
    return chosen, skipped


class DiscoveredEngines:
    """A ``Probe`` over the pods' engines: ``update(found)`` after each pod change, ``read()`` each tick.

    Each pool reading carries ``extra.pod`` (``namespace/name``)."""

    name = "kubernetes-pods"

    def __init__(
        self,
        scrape_interval_s: float,
        *,
        reserved_pools: Collection[str] = (),
    ) -> None:
        self._interval_s = scrape_interval_s
        self._reserved = frozenset(reserved_pools)
        self._watch: Callable[[EngineAbsences], None] = lambda probe: None
        self._unwatch: Callable[[EngineAbsences], None] = lambda probe: None
        self._lock = threading.Lock()
        self._read: dict[str, tuple[PodEngine, EngineScrapeProbe, BackgroundProbe]] = {}
        self._found: dict[str, PodEngine] = {}
        self._logged: dict[str, str] = {}
        self._on_found: list[Callable[[], None]] = []
        self._source: PodWatch | None = None

    def report_absences(
        self, watch: Callable[[EngineAbsences], None], unwatch: Callable[[EngineAbsences], None]
    ) -> None:
        """Serve each engine probe's absent metrics while it is read (``AgentTelemetry.watch_engine``)."""
        with self._lock:
            self._watch, self._unwatch = watch, unwatch
            for _, probe, _ in self._read.values():
                watch(probe)

    def follow(self, source: PodWatch) -> None:
        """Start ``source`` (whose ``on_change`` is this ``update``); ``close()`` stops it."""
        self._source = source
        source.start()

    def update(self, found: Mapping[str, PodEngine]) -> None:
        """Read exactly the chosen engines of ``found``: new pods start, gone or changed ones stop."""
        chosen, skipped = choose_engines(found, self._reserved)
        for key, why in skipped.items():
            if self._logged.get(key) != why:
                log.warning("pod %s: %s; the pod is not read", key, why)
        self._logged = skipped
        with self._lock:
            self._found = dict(found)
            gone = [key for key, (engine, _, _) in self._read.items() if chosen.get(key) != engine]
            stopped = [self._read.pop(key) for key in gone]
            for key, engine in chosen.items():
                if key not in self._read:
                    probe = EngineScrapeProbe(engine.kind, engine.url, engine.pool)
                    self._read[key] = (engine, probe, BackgroundProbe(probe, self._interval_s))
                    self._watch(probe)
                    log.info(
                        "pod %s: reading its %s engine at %s as pool %s", key, engine.kind, engine.url, engine.pool
                    )
            callbacks = list(self._on_found)
        for engine, probe, background in stopped:
            self._unwatch(probe)
            background.close()
            log.info("pod %s: no longer read", engine.pod)
        for callback in callbacks:
            callback()

    def pools_by_pod(self) -> dict[str, str]:
        """``namespace/name`` → pool of every annotated pod found (read or skipped): who a GPU's user serves."""
        with self._lock:
            return {key: engine.pool for key, engine in self._found.items()}

    def on_found(self, callback: Callable[[], None]) -> None:
        """Call ``callback`` after each update (the GPU attribution refreshes then)."""
        with self._lock:
            self._on_found.append(callback)

    def read(self) -> list[Reading]:
        with self._lock:
            read = list(self._read.items())
        return [replace(r, extra={**r.extra, "pod": key}) for key, (_, _, bg) in read for r in bg.read()]

    def close(self) -> None:
        if self._source is not None:
            self._source.close()
        self.update({})

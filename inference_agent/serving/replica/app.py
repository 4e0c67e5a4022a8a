"""A replica's state, shared by its request threads: the engine, the request ledger, and whether it admits work.

Kept apart from ``__main__.py`` (the process entry point, run as ``__main__``) so that the routes and the entry
point share one copy of these classes.
"""

from __future__ import annotations

import dataclasses
import threading
import time
import uuid
from enum import StrEnum
from typing import Any

from inference_agent.heap import heap_stats
from inference_agent.isolation.tenant_usage import TenantUsage
from inference_agent.serving.replica.ledger import RequestLedger
from inference_agent.serving.replica.metrics import ReplicaMetrics
from inference_agent.torch_runtime.api import EngineStats, FinishReason, ImageClassifier, TextEngine


class ReplicaState(StrEnum):
    WARMING = "warming"
    READY = "ready"
    DRAINING = "draining"


class Refused(Exception):
    """The replica does not take new requests now (warming or draining): answered 503."""


class ReplicaApp:
    """The replica's state, shared by its request threads: the engine, the ledger, and whether it admits work.

    ``model_name`` is the name it serves under (``/v1/models``, the metrics' ``model_name`` label); the pool's name
    when not given. ``key``: what a caller must present (``key.py``); None: anyone may call it.
    """

    def __init__(
        self,
        pool: str,
        kind: str,
        ledger: RequestLedger | None = None,
        *,
        model_name: str | None = None,
        key: str | None = None,
    ) -> None:
        self.pool = pool
        self.key = key
        self.kind = kind
        self.model_name = model_name or pool
        self.ledger = ledger or RequestLedger()
        self.metrics = ReplicaMetrics(self.model_name, kind, self.engine_stats)
        self.usage = TenantUsage()
        self.instance = uuid.uuid4().hex
        self.started_at = time.time()
        self.state = ReplicaState.WARMING
        self.text_engine: TextEngine | None = None
        self.classifier: ImageClassifier | None = None
        self._lock = threading.Lock()
        self._active: dict[str, str] = {}  # request id → tenant

    def ready(self, *, text_engine: TextEngine | None = None, classifier: ImageClassifier | None = None) -> None:
        with self._lock:
            self.text_engine = text_engine
            self.classifier = classifier
            if self.state is ReplicaState.WARMING:
                self.state = ReplicaState.READY

    def admit(self, request_id: str, tenant: str) -> None:
        """Count the request in, atomically with the state check, so that a drain never misses it."""
        with self._lock:
            if self.state is not ReplicaState.READY:
                self.ledger.reject()
                raise Refused(self.state.value)
            self.ledger.arrive()
            self.usage.arrive(tenant)
            self._active[request_id] = tenant

    def done(self, request_id: str, latency_s: float, finish: FinishReason | None) -> None:
        """The request left: finished with ``finish`` (an abort is not ok), or failed (None)."""
        with self._lock:
            tenant = self._active.pop(request_id, None)
        ok = finish is not None and finish is not FinishReason.ABORT
        self.ledger.finish(latency_s, ok=ok)
        if finish is not None:
            self.metrics.finished(latency_s, finish)
        if tenant is not None:
            self.usage.finish(tenant, request_id, latency_s, ok=ok)

    def drain(self) -> None:
        with self._lock:
            self.state = ReplicaState.DRAINING

    def abort_all(self) -> int:
        with self._lock:
            active = list(self._active)
        if self.text_engine is not None:
            for request_id in active:
                self.text_engine.abort(request_id)
        return len(active)

    def engine_stats(self) -> EngineStats | None:
        engine = self.text_engine or self.classifier
        return engine.stats() if engine is not None else None

    def stats(self) -> dict[str, Any]:
        engine_stats = self.engine_stats()
        kv_blocks_used = (
            engine_stats.kv_blocks_used if engine_stats is not None and engine_stats.kv_blocks_total else None
        )
        return {
            "instance": self.instance,
            "pool": self.pool,
            "kind": self.kind,
            "state": self.state.value,
            "started_at": self.started_at,
            "engine": None
            if engine_stats is None
            else {**dataclasses.asdict(engine_stats), "kv_utilization_ratio": engine_stats.kv_utilization_ratio},
            **self.ledger.snapshot(),
            "tenants": self.usage.snapshot(kv_blocks_used),
            "heap": heap_stats(),
        }

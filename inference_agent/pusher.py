"""The pusher: spooled samples to ``POST /api/v1/ingest``, in order, acknowledged only when the collector committed.

Keep-alive HTTP and gzip bodies; exponential backoff with full jitter while the collector is away (honouring
``Retry-After``); the round trip of each answered push becomes ``network_latency_seconds``; the ``desired`` state
of each answer goes to the workload side. A batch the collector rejects as invalid (422) can never succeed: it is
set aside in ``rejected/`` with the collector's reason, counted, and the pusher goes on.
"""

from __future__ import annotations

import gzip
import json
import logging
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any

import httpx

from inference_agent.probes.base import GpuInfo
from inference_agent.spool import Spool, SpoolBatch
from inference_agent.telemetry import AgentTelemetry

log = logging.getLogger(__name__)
LATENCY_FRESH_FOR_S = 10.0


class PushOutcome(StrEnum):
    PUSHED = "pushed"
    NOTHING = "nothing"
    FAILED = "failed"
    REJECTED = "rejected"


@dataclass(frozen=True)
class PushResult:
    outcome: PushOutcome
    samples: int = 0
    retry_after_s: float | None = None


def backoff_delay(failures: int, *, base_s: float = 0.5, cap_s: float = 30.0, rng: random.Random) -> float:
    """Full jitter: uniform in [0, min(cap, base × 2^(failures−1))] — 4 failures → up to 4 s."""
    ceiling = min(cap_s, base_s * 2 ** max(0, failures - 1))
    return rng.uniform(0.0, ceiling)


def inventory_body(hostname: str, agent_version: str, gpus: list[GpuInfo]) -> dict[str, Any]:
    return {
        "hostname": hostname,
        "agent_version": agent_version,
        "gpus": [vars(g) for g in gpus],
    }


class Pusher:
    def __init__(
        self,
        spool: Spool,
        client: httpx.Client,
        telemetry: AgentTelemetry,
        *,
        node_id: str,
        token: str,
        inventory: dict[str, Any] | None,
        on_desired: Callable[[dict[str, Any]], None] = lambda _d: None,
        max_batch: int = 2000,
        rejected_dir: Path,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._spool = spool
        self._client = client
        self._telemetry = telemetry
        self._node_id = node_id
        self._headers = {
            "Authorization": f"Bearer {token}",
            "Content-Type": "application/json",
            "Content-Encoding": "gzip",
        }
        self._inventory = inventory
        self._on_desired = on_desired
        self._max_batch = max_batch
        self._rejected_dir = rejected_dir
        self._clock = clock
        self._latency: tuple[float, float] | None = None  # (measured at, seconds)

    def network_latency(self) -> float | None:
        """The last answered push's round trip, while it is recent enough to describe the network now."""
        latency = self._latency
        if latency is None or self._clock() - latency[0] > LATENCY_FRESH_FOR_S:
            return None
        return latency[1]

    def push_once(self) -> PushResult:
        batch = self._spool.read(self._max_batch)
        if batch is None:
            return PushResult(PushOutcome.NOTHING)
        body: dict[str, Any] = {"node_id": self._node_id, "samples": batch.samples}
        if self._inventory is not None:
            body["inventory"] = self._inventory
        payload = gzip.compress(json.dumps(body, separators=(",", ":")).encode(), compresslevel=5)
        started = time.perf_counter()
        try:
            answer = self._client.post("/api/v1/ingest", content=payload, headers=self._headers)
        except httpx.HTTPError as exc:
            log.debug("push of %d samples failed: %s", len(batch.samples), exc)
            self._telemetry.pushes.labels("failed").inc()
            return PushResult(PushOutcome.FAILED)
        round_trip = time.perf_counter() - started
        self._latency = (self._clock(), round_trip)
        self._telemetry.push_latency.observe(round_trip)
        return self._handle(answer, batch)

    def _handle(self, answer: httpx.Response, batch: SpoolBatch) -> PushResult:
        if answer.status_code == 200:
            return self._acknowledged(answer, batch)
        if answer.status_code == 413 and self._max_batch > 1:
            self._max_batch = max(1, self._max_batch // 2)
            log.warning("collector refused a batch as too large; pushing at most %d samples", self._max_batch)
            return PushResult(PushOutcome.FAILED)
        if answer.status_code in (413, 422):
            return self._reject(answer, batch)
        self._telemetry.pushes.labels("failed").inc()
        if answer.status_code in (401, 403):
            log.error("collector refused the token (%d): %s; samples stay spooled", answer.status_code, answer.text)
        else:
            log.warning("collector answered %d; samples stay spooled", answer.status_code)
        return PushResult(PushOutcome.FAILED, retry_after_s=_retry_after(answer))

    def _acknowledged(self, answer: httpx.Response, batch: SpoolBatch) -> PushResult:
        self._spool.ack(batch)
        self._inventory = None  # registered: the collector has it now
        result = answer.json()
        self._telemetry.pushes.labels("ok").inc()
        self._telemetry.pushed_samples.labels("accepted").inc(result.get("accepted", 0))
        self._telemetry.pushed_samples.labels("duplicate").inc(result.get("duplicates", 0))
        self._on_desired(result.get("desired") or {})  # nothing desired: the control plane's limits are lifted
        return PushResult(PushOutcome.PUSHED, samples=len(batch.samples))

    def _reject(self, answer: httpx.Response, batch: SpoolBatch) -> PushResult:
        self._rejected_dir.mkdir(parents=True, exist_ok=True)
        path = self._rejected_dir / f"seq-{batch.samples[0]['seq']}-{batch.last_seq}.json"
        path.write_text(json.dumps({"status": answer.status_code, "answer": answer.text, "samples": batch.samples}))
        self._spool.ack(batch)
        self._telemetry.pushes.labels("rejected").inc()
        self._telemetry.pushed_samples.labels("rejected").inc(len(batch.samples))
        log.error(
            "collector rejected %d samples (%d: %s); set aside in %s",
            len(batch.samples),
            answer.status_code,
            answer.text[:500],
            path,
        )
        return PushResult(PushOutcome.REJECTED, samples=len(batch.samples))

    def run(self, stop: threading.Event, *, interval_s: float, seed: int | None = None) -> None:
        """Push until ``stop``: at most every ``interval_s`` once caught up, backing off while pushes fail."""
        rng = random.Random(seed)
        failures = 0
        while not stop.is_set():
            result = self.push_once()
            if result.outcome is PushOutcome.FAILED:
                failures += 1
                stop.wait(max(backoff_delay(failures, rng=rng), result.retry_after_s or 0.0))
            elif result.outcome is PushOutcome.NOTHING or result.samples < self._max_batch:
                failures = 0
                stop.wait(interval_s)  # caught up: let an interval's ticks gather (1 s at 500 ms ticks → 2 ticks)
            else:
                failures = 0  # a full batch: more is waiting (a replay after an outage), push on at once

    def flush(self, deadline_s: float) -> int:
        """At shutdown: push what is spooled until nothing is left or ``deadline_s`` passes; returns samples left."""
        end = self._clock() + deadline_s
        while self._clock() < end:
            result = self.push_once()
            if result.outcome in (PushOutcome.NOTHING, PushOutcome.FAILED):
                break
        return self._spool.pending


def _retry_after(answer: httpx.Response) -> float | None:
    value = answer.headers.get("retry-after")
    try:
        return float(value) if value is not None else None
    except ValueError:
        return None

"""One replica's usage per tenant (``X-Tenant``): what the enforcer needs to tell a noisy neighbour from its victim.

The tenant is the one the front end authenticated (``inference_agent.serving.frontend.tenant_identity``): a tenant the
control plane knows, or ``default``, so a replica holds one record per known tenant. Records are never pruned: the
counters are cumulative and the builtin probe takes deltas, so a record dropped and made again would read as a
negative rate; ``MAX_TENANTS`` stays as the bound for a caller that reaches a replica's loopback port directly.

Counters (requests arrived, tokens generated) are cumulative since the replica started, so the builtin probe takes
deltas as it does for the pool; latencies are kept for the trailing window (10 s, as the pool's p99) and handed out
raw so that one p99 is taken over every replica of a pool. KV blocks are not tracked per sequence by the engines, so
the engine's blocks in use are attributed in proportion to the tokens each tenant's generating requests hold:
30 blocks used, tenant a holding 300 tokens and b 100 → a 22.5 blocks, b 7.5.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from inference_agent.serving.replica.ledger import LATENCY_WINDOW_S, MAX_WINDOW_SAMPLES
from inference_agent.torch_runtime.api import FinishReason, TokenEvent
from wire.percentile import percentile_or_none

MAX_TENANTS = 256  # tenants tracked by name; any further name is counted under OTHER_TENANTS
OTHER_TENANTS = "_other"  # a flood of made-up names straight at a replica must not grow /stats without bound


@dataclass
class _Tenant:
    arrived: int = 0
    generated_tokens: int = 0
    latencies: deque[tuple[float, float]] = field(default_factory=lambda: deque(maxlen=MAX_WINDOW_SAMPLES))


@dataclass
class _Held:
    """Tokens an in-flight request holds in the KV cache; counted once it generates (before, it may still wait)."""

    tenant: str
    tokens: int
    generating: bool = False


class TenantUsage:
    def __init__(self, *, window_s: float = LATENCY_WINDOW_S, clock: Callable[[], float] = time.monotonic) -> None:
        self.window_s = window_s
        self._clock = clock
        self._lock = threading.Lock()
        self._tenants: dict[str, _Tenant] = {}
        self._held: dict[str, _Held] = {}  # by request id

    def _tenant(self, name: str) -> _Tenant:
        """The record of ``name`` (call with the lock held); past MAX_TENANTS names, the shared OTHER_TENANTS one."""
        found = self._tenants.get(name)
        if found is None:
            if len(self._tenants) >= MAX_TENANTS:
                name = OTHER_TENANTS
            found = self._tenants.setdefault(name, _Tenant())
        return found

    def arrive(self, tenant: str) -> None:
        with self._lock:
            self._tenant(tenant).arrived += 1

    def finish(self, tenant: str, request_id: str, latency_s: float, *, ok: bool) -> None:
        """The request is over: it holds no KV blocks any more, and a successful one adds a latency sample."""
        with self._lock:
            self._held.pop(request_id, None)
            if ok:
                self._tenant(tenant).latencies.append((self._clock(), latency_s))

    def meter(
        self, tenant: str, request_id: str, prompt_tokens: int, events: Iterator[TokenEvent]
    ) -> Iterator[TokenEvent]:
        """Pass ``events`` through, counting each generated token (an abort event carries none) as it happens."""
        with self._lock:
            self._held[request_id] = _Held(tenant, prompt_tokens)
        return self._metered(tenant, request_id, events)

    def _metered(self, tenant: str, request_id: str, events: Iterator[TokenEvent]) -> Iterator[TokenEvent]:
        try:
            for event in events:
                if event.finish_reason is not FinishReason.ABORT:
                    with self._lock:
                        self._tenant(tenant).generated_tokens += 1
                        held = self._held.get(request_id)
                        if held is not None:
                            held.tokens += 1
                            held.generating = True
                yield event
        finally:
            with self._lock:
                self._held.pop(request_id, None)

    def snapshot(self, kv_blocks_used: int | None) -> dict[str, dict[str, Any]]:
        """Per tenant: counters, the window's latencies, and (given the engine's blocks in use) its KV blocks."""
        with self._lock:
            horizon = self._clock() - self.window_s
            held: dict[str, int] = {}
            for request in self._held.values():
                if request.generating:
                    held[request.tenant] = held.get(request.tenant, 0) + request.tokens
            total_held = sum(held.values())
            out: dict[str, dict[str, Any]] = {}
            for name, tenant in self._tenants.items():
                while tenant.latencies and tenant.latencies[0][0] < horizon:
                    tenant.latencies.popleft()
                window = [seconds for _, seconds in tenant.latencies]
                out[name] = {
                    "arrived": tenant.arrived,
                    "generated_tokens": tenant.generated_tokens,
                    "latency_samples_seconds": [round(s, 6) for s in window],
                    "latency_p99_seconds": percentile_or_none(window, 99.0),
                }
                if kv_blocks_used is not None:
                    share = held.get(name, 0) / total_held if total_held else 0.0
                    out[name]["kv_blocks"] = round(kv_blocks_used * share, 3)
            return out

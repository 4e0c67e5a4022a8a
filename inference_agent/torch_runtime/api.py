"""What the serving layer needs from an engine: the requests it takes, the events it yields, the stats it reports.

The serving layer (``inference_agent/serving``) codes against these types only; the torch engines in this package
implement them. Keeping torch behind this line lets the front end and the supervisor import without torch.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from enum import IntEnum, StrEnum
from typing import Protocol


class Priority(IntEnum):
    """Lower runs first: a latency-critical request is scheduled before standard and batch ones."""

    LATENCY_CRITICAL = 0
    STANDARD = 1
    BATCH = 2


class FinishReason(StrEnum):
    LENGTH = "length"  # max_tokens reached
    STOP = "stop"  # the model produced its end-of-text token
    ABORT = "abort"  # the client went away or the replica is stopping


@dataclass(frozen=True)
class CompletionRequest:
    request_id: str
    prompt: str
    max_tokens: int
    priority: Priority = Priority.STANDARD
    tenant: str = "default"
    kv_share: float | None = None  # the tenant's share of the KV cache under contention (None: no budget)


@dataclass(frozen=True)
class TokenEvent:
    """One generated token of one request; the last event of a request has ``finish_reason`` set."""

    request_id: str
    token_id: int
    text: str
    finish_reason: FinishReason | None = None


@dataclass(frozen=True)
class CompletionResult:
    request_id: str
    text: str
    prompt_tokens: int
    completion_tokens: int
    finish_reason: FinishReason


@dataclass(frozen=True)
class EngineStats:
    """A snapshot for the sampler and the router; counters are cumulative since the engine started."""

    running: int
    waiting: int
    swapped: int
    kv_blocks_total: int
    kv_blocks_used: int
    kv_fragmentation_ratio: float  # allocated-but-unused token slots / allocated slots
    swaps_out: int
    swaps_in: int
    prompt_tokens: int
    generated_tokens: int
    finished_requests: int

    @property
    def kv_utilization_ratio(self) -> float | None:
        """Blocks in use over blocks available; None for an engine without a KV cache (the classifier)."""
        return self.kv_blocks_used / self.kv_blocks_total if self.kv_blocks_total else None


class TextEngine(Protocol):
    """A text-generation engine with its own scheduling loop; every method is safe to call from any thread."""

    def start(self) -> None: ...

    def warm_up(self) -> None: ...

    def submit(self, request: CompletionRequest) -> Iterator[TokenEvent]:
        """Queue ``request`` and yield its tokens as they are generated (blocking the caller between tokens)."""
        ...

    def abort(self, request_id: str) -> None: ...

    def stats(self) -> EngineStats: ...

    def stop(self) -> None: ...


@dataclass(frozen=True)
class Classification:
    label: int
    score: float


class ImageClassifier(Protocol):
    """A batched image classifier over 3×64×64 inputs with values in 0..1."""

    def start(self) -> None: ...

    def warm_up(self) -> None: ...

    def classify(self, images: Sequence[Sequence[Sequence[Sequence[float]]]]) -> list[Classification]:
        """Classify ``images`` (blocking); they may be batched with other callers' images."""
        ...

    def stats(self) -> EngineStats: ...

    def stop(self) -> None: ...

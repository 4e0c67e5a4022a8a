"""One request's life inside an engine: its tokens, where it is (waiting, running, swapped), and its event queue."""

from __future__ import annotations

import queue
from dataclasses import dataclass, field
from enum import StrEnum

from inference_agent.torch_runtime.api import CompletionRequest, FinishReason, TokenEvent
from inference_agent.torch_runtime.scheduler import SeqView, StepKind, StepReason
from inference_agent.torch_runtime.tokenizer import StreamDecoder


class SeqStatus(StrEnum):
    WAITING = "waiting"
    RUNNING = "running"
    SWAPPED = "swapped"
    HOLDING = "holding"  # finished, still holding its blocks until its static batch ends
    FINISHED = "finished"


@dataclass(eq=False)
class Sequence:
    request: CompletionRequest
    prompt_ids: list[int]
    max_new_tokens: int  # max_tokens, capped so prompt + generated fits the model's context
    arrival_s: float
    counted: bool = True  # False for the warm-up request: it stays out of the stats
    generated: list[int] = field(default_factory=list)
    cached_tokens: int = 0  # tokens whose K/V are in the cache; the last generated token is not yet
    status: SeqStatus = SeqStatus.WAITING
    last_scheduled: int = -1
    events: queue.SimpleQueue[TokenEvent] = field(default_factory=queue.SimpleQueue)
    decoder: StreamDecoder = field(default_factory=StreamDecoder)

    @property
    def seq_id(self) -> str:
        return self.request.request_id

    def view(self, blocks: int = 0) -> SeqView:
        tokens = self.cached_tokens if self.cached_tokens else len(self.prompt_ids)
        request = self.request
        return SeqView(
            self.seq_id, int(request.priority), self.arrival_s, tokens, blocks, self.last_scheduled, request.tenant
        )

    def emit(self, token_id: int, finish: FinishReason | None) -> None:
        """Hand one generated token (and, on the last one, the finish reason) to the consumer."""
        text = self.decoder.push(token_id)
        if finish is not None:
            text += self.decoder.flush()
            self.status = SeqStatus.FINISHED
        self.events.put(TokenEvent(self.seq_id, token_id, text, finish))

    def abort(self) -> None:
        """End the stream without a token (token id -1): the client left or the engine is stopping."""
        self.status = SeqStatus.FINISHED
        self.events.put(TokenEvent(self.seq_id, -1, self.decoder.flush(), FinishReason.ABORT))


@dataclass(frozen=True)
class StepRecord:
    """One step of the engine loop, for tests and the benchmark: what ran and how full the KV cache was."""

    step: int
    now_s: float
    kind: StepKind
    reason: StepReason
    prefill: tuple[str, ...]
    decode: tuple[str, ...]
    pad: tuple[str, ...]
    swap_out: tuple[str, ...]
    swap_in: tuple[str, ...]
    kv_used_slots: int
    kv_allocated_slots: int
    duration_s: float
    wait_until_s: float | None = None  # an idle step: when the loop should plan again if nothing arrives

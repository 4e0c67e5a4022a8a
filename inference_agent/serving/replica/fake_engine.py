"""Small, deterministic stand-ins for the torch engines, implementing the same Protocols (``torch_runtime/api.py``).

They let the serving layer, the supervisor and the front end be tested fast and without torch: tokens depend only on
the prompt, each takes ``token_delay_s``, at most ``max_running`` requests run at once (the rest wait, which is the
queue depth), and each running sequence holds ``ceil(tokens / block_size)`` KV blocks.
"""

from __future__ import annotations

import math
import threading
import time
import zlib
from collections.abc import Iterator, Sequence

from inference_agent.torch_runtime.api import (
    Classification,
    CompletionRequest,
    EngineStats,
    FinishReason,
    TokenEvent,
)
from inference_agent.torch_runtime.tokenizer import count_prompt_tokens

ALPHABET = "abcdefghijklmnopqrstuvwxyz "


def fake_tokens(prompt: str, count: int) -> list[int]:
    """The token ids the fake generates for ``prompt``: the same prompt always gives the same text."""
    seed = zlib.crc32(prompt.encode())
    return [(seed + 7 * i) % len(ALPHABET) for i in range(count)]


class FakeTextEngine:
    def __init__(
        self, *, token_delay_s: float = 0.002, max_running: int = 8, kv_blocks_total: int = 256, block_size: int = 16
    ) -> None:
        self.token_delay_s = token_delay_s
        self.block_size = block_size
        self.kv_blocks_total = kv_blocks_total
        self._slots = threading.BoundedSemaphore(max_running)
        self._lock = threading.Lock()
        self._running: dict[str, int] = {}  # request id → tokens held (prompt + generated)
        self._waiting = 0
        self._aborted: set[str] = set()
        self._stopped = threading.Event()
        self._prompt_tokens = 0
        self._generated_tokens = 0
        self._finished = 0

    def start(self) -> None:
        self._stopped.clear()

    def warm_up(self) -> None:
        for _ in self.submit(CompletionRequest("warm-up", "warm up", 2)):
            pass

    def submit(self, request: CompletionRequest) -> Iterator[TokenEvent]:
        prompt_tokens = count_prompt_tokens(request.prompt)
        with self._lock:
            self._waiting += 1
        with self._slots:
            with self._lock:
                self._waiting -= 1
                self._running[request.request_id] = prompt_tokens
                self._prompt_tokens += prompt_tokens
            try:
                yield from self._generate(request)
            finally:
                with self._lock:
                    self._running.pop(request.request_id, None)
                    self._aborted.discard(request.request_id)
                    self._finished += 1

    def _generate(self, request: CompletionRequest) -> Iterator[TokenEvent]:
        ids = fake_tokens(request.prompt, request.max_tokens)
        for i, token in enumerate(ids):
            if self._stopped.wait(self.token_delay_s) or request.request_id in self._aborted:
                yield TokenEvent(request.request_id, token, "", FinishReason.ABORT)
                return
            with self._lock:
                self._running[request.request_id] += 1
                self._generated_tokens += 1
            last = i == len(ids) - 1
            yield TokenEvent(request.request_id, token, ALPHABET[token], FinishReason.LENGTH if last else None)

    def abort(self, request_id: str) -> None:
        with self._lock:
            if request_id in self._running:
                self._aborted.add(request_id)

    def stats(self) -> EngineStats:
        with self._lock:
            used = sum(math.ceil(tokens / self.block_size) for tokens in self._running.values())
            slots = sum(math.ceil(t / self.block_size) * self.block_size for t in self._running.values())
            held = sum(self._running.values())
            return EngineStats(
                running=len(self._running),
                waiting=self._waiting,
                swapped=0,
                kv_blocks_total=self.kv_blocks_total,
                kv_blocks_used=min(used, self.kv_blocks_total),
                kv_fragmentation_ratio=(slots - held) / slots if slots else 0.0,
                swaps_out=0,
                swaps_in=0,
                prompt_tokens=self._prompt_tokens,
                generated_tokens=self._generated_tokens,
                finished_requests=self._finished,
            )

    def stop(self) -> None:
        self._stopped.set()


class FakeClassifier:
    """Labels an image by its mean brightness (0..9) after ``batch_delay_s``."""

    def __init__(self, *, batch_delay_s: float = 0.002) -> None:
        self.batch_delay_s = batch_delay_s
        self._lock = threading.Lock()
        self._running = 0
        self._finished = 0

    def start(self) -> None:
        return None

    def warm_up(self) -> None:
        self.classify([[[[0.5] * 64] * 64] * 3])

    def classify(self, images: Sequence[Sequence[Sequence[Sequence[float]]]]) -> list[Classification]:
        with self._lock:
            self._running += 1
        try:
            time.sleep(self.batch_delay_s)
            results = []
            for image in images:
                values = [v for plane in image for row in plane for v in row]
                mean = math.fsum(values) / len(values) if values else 0.0
                results.append(Classification(min(9, int(mean * 10)), 0.5 + mean / 2))
            return results
        finally:
            with self._lock:
                self._running -= 1
                self._finished += 1

    def stats(self) -> EngineStats:
        with self._lock:
            return EngineStats(self._running, 0, 0, 0, 0, 0.0, 0, 0, 0, 0, self._finished)

    def stop(self) -> None:
        return None

"""The replica's HTTP routes: completions and chat completions (plain and streamed), classify, health (``/healthz``
and vLLM's ``/health``), ``/v1/models``, ``/metrics`` in vLLM's names (``metrics.py``), stats and drain.

Every route but health, ``/metrics`` and ``/v1/models`` needs the replica's key (``key.py``): 401 without it,
before a byte of the body is read. So only the front end and the agent call it, and the headers below are theirs.
The front end passes the request's priority (``X-Fleetpilot-Priority``: 0 latency-critical, 1 standard, 2 batch),
the tenant (``X-Tenant``), the tenant's share of the KV cache (``X-Fleetpilot-KV-Share``, its block budget when the
cache is contended) and how long the request waited in its queue (``X-Fleetpilot-Queued-Seconds``), which is added
to the end-to-end latency the replica records.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, ClassVar

from prometheus_client import CONTENT_TYPE_LATEST

from inference_agent.http_server import ClientGone, JsonHandler
from inference_agent.serving.frontend.schema import (
    SSE_DONE,
    BadRequest,
    ChatBody,
    ClassifyBody,
    CompletionBody,
    chat_answer,
    chat_chunk,
    completion_answer,
    completion_chunk,
    parse_chat,
    parse_classify,
    parse_completion,
    parse_json,
)
from inference_agent.serving.replica.app import Refused, ReplicaApp
from inference_agent.serving.replica.key import holds_key
from inference_agent.serving.replica.metrics import timed_first_token
from inference_agent.torch_runtime.api import CompletionRequest, CompletionResult, FinishReason, Priority, TokenEvent
from inference_agent.torch_runtime.tokenizer import count_prompt_tokens

log = logging.getLogger(__name__)
PRIORITY_HEADER = "X-Fleetpilot-Priority"
QUEUED_HEADER = "X-Fleetpilot-Queued-Seconds"
KV_SHARE_HEADER = "X-Fleetpilot-KV-Share"  # the tenant's share of the KV cache, set by the front end
Body = CompletionBody | ChatBody | ClassifyBody
# path → (the kind of pool that answers it, its request ids' prefix, its body's parser)
ROUTES: dict[str, tuple[str, str, Callable[[dict[str, Any]], Body]]] = {
    "/v1/completions": ("text", "cmpl", parse_completion),
    "/v1/chat/completions": ("text", "chatcmpl", parse_chat),
    "/v1/classify": ("classify", "cls", parse_classify),
}


def _priority(text: str | None) -> Priority:
    try:
        return Priority(int(text)) if text is not None else Priority.STANDARD
    except ValueError:
        return Priority.STANDARD


def _kv_share(header: str | None) -> float | None:
    """The KV share header as a fraction in (0, 1]; absent or malformed: no budget (the front end sets it)."""
    try:
        share = float(header) if header else None
    except ValueError:
        return None
    return share if share is not None and 0 < share <= 1 else None


def _queued_s(text: str | None) -> float:
    try:
        return max(0.0, float(text)) if text is not None else 0.0
    except ValueError:
        return 0.0


class ReplicaHandler(JsonHandler):
    app: ClassVar[ReplicaApp]  # the replica whose requests it answers (``handler_for``)

    def on_get(self, path: str) -> None:
        if path in ("/healthz", "/health"):
            ready = self.app.state.value == "ready"
            self.answer_json(200 if ready else 503, {"state": self.app.state.value, "pool": self.app.pool})
        elif path == "/metrics":
            self.answer_bytes(200, self.app.metrics.exposition(), CONTENT_TYPE_LATEST)
        elif path == "/v1/models":
            model = {"id": self.app.model_name, "object": "model", "created": int(self.app.started_at)}
            self.answer_json(200, {"object": "list", "data": [{**model, "owned_by": "fleetpilot"}]})
        elif path == "/stats":
            if self._keyed():
                self.answer_json(200, self.app.stats())
        else:
            self.answer_json(404, {"detail": f"not found: {path}"})

    def _keyed(self, close: bool = False) -> bool:
        """Whether the caller holds the replica's key (the front end and the agent do); answered 401 if not."""
        if self.app.key is None or holds_key(self.headers.get("Authorization"), self.app.key):
            return True
        detail = "replica key required: only the agent's front end calls a replica; send your tenant key there"
        self.answer_json(401, {"detail": detail}, close=close)
        return False

    def before_body(self, path: str, length: int) -> bool:
        return self._keyed(close=True)

    def on_post(self, path: str, raw: bytes) -> None:
        if path == "/drain":
            self.app.drain()
            self.answer_json(200, {"state": self.app.state.value, "in_flight": self.app.ledger.in_flight})
            return
        route = ROUTES.get(path)
        if route is None:
            self.answer_json(404, {"detail": f"not found: {path}"})
            return
        kind, id_prefix, parse = route
        if kind != self.app.kind:
            self.answer_json(404, {"detail": f"pool {self.app.pool} serves {self.app.kind}, not {path}"})
            return
        started = time.monotonic() - _queued_s(self.headers.get(QUEUED_HEADER))
        request_id = f"{id_prefix}-{uuid.uuid4().hex[:24]}"
        tenant = self.headers.get("X-Tenant") or "default"
        try:
            parsed = parse(parse_json(raw))
            self.app.admit(request_id, tenant)
        except BadRequest as exc:
            self.answer_json(422, exc.body())
            return
        except Refused as exc:
            self.answer_json(503, {"detail": f"replica {exc}"}, headers={"Retry-After": "1"})
            return
        finish: FinishReason | None = None
        try:
            finish = self._serve(request_id, tenant, parsed, started)
        except BadRequest as exc:  # the engine refused it (longer than its context or KV pool)
            self.answer_json(422, exc.body())
        except Exception:
            log.exception("request %s failed", request_id)
            self.answer_json(500, {"detail": "the engine failed; see the replica's log"}, close=True)
        finally:
            self.app.done(request_id, time.monotonic() - started, finish)

    def _serve(self, request_id: str, tenant: str, parsed: Body, started: float) -> FinishReason:
        if isinstance(parsed, ClassifyBody):
            assert self.app.classifier is not None
            results = self.app.classifier.classify(parsed.inputs)
            labels = [{"label": r.label, "score": r.score} for r in results]
            self.answer_json(200, {"model": parsed.model, "results": labels})
            return FinishReason.STOP
        assert self.app.text_engine is not None
        request = CompletionRequest(
            request_id,
            parsed.prompt,
            parsed.max_tokens,
            _priority(self.headers.get(PRIORITY_HEADER)),
            tenant,
            _kv_share(self.headers.get(KV_SHARE_HEADER)),
        )
        try:
            events = self.app.text_engine.submit(request)
        except ValueError as exc:
            raise BadRequest("prompt" if str(exc).startswith("prompt is") else "max_tokens", str(exc)) from None
        events = self.app.usage.meter(tenant, request_id, count_prompt_tokens(request.prompt), events)
        events = timed_first_token(events, started, self.app.metrics)
        if parsed.stream:
            return self._stream(request, _chunks(parsed, request_id), events)
        result = collect(request, events)
        answer = chat_answer if isinstance(parsed, ChatBody) else completion_answer
        self.answer_json(200, answer(result, parsed.model))
        return result.finish_reason

    def _stream(self, request: CompletionRequest, chunks: Chunks, events: Iterator[TokenEvent]) -> FinishReason:
        assert self.app.text_engine is not None
        self.start_stream(200, "text/event-stream")
        finish = FinishReason.ABORT
        try:
            for chunk in chunks.opening():
                self.write_chunk(chunk)
            for event in events:
                finish = event.finish_reason or finish
                self.write_chunk(chunks.token(event.text, event.finish_reason))
            self.write_chunk(SSE_DONE)
        except ClientGone:
            self.app.text_engine.abort(request.request_id)
            for _ in events:  # let the engine release the sequence
                pass
            return FinishReason.ABORT
        self.end_stream()
        return finish


def handler_for(app: ReplicaApp) -> type[ReplicaHandler]:
    """The handler class of ``app``'s server (the server makes one handler per connection)."""

    class BoundHandler(ReplicaHandler):
        pass

    BoundHandler.app = app
    return BoundHandler


@dataclass(frozen=True)
class Chunks:
    """The events of one streamed answer: a chat stream opens with the assistant's role; completions do not."""

    chat: bool
    request_id: str
    model: str
    created: int

    def opening(self) -> tuple[bytes, ...]:
        if not self.chat:
            return ()
        return (chat_chunk(self.request_id, self.model, self.created, {"role": "assistant", "content": ""}, None),)

    def token(self, text: str, finish: FinishReason | None) -> bytes:
        reason = finish.value if finish is not None else None
        if self.chat:
            return chat_chunk(self.request_id, self.model, self.created, {"content": text}, reason)
        return completion_chunk(self.request_id, self.model, self.created, text, reason)


def _chunks(parsed: CompletionBody | ChatBody, request_id: str) -> Chunks:
    return Chunks(isinstance(parsed, ChatBody), request_id, parsed.model, int(time.time()))


def collect(request: CompletionRequest, events: Iterator[TokenEvent]) -> CompletionResult:
    """Gather a request's token events into one result; an abort event carries no token.

    Prompt tokens are counted as the byte-level tokenizer counts them: the prompt's bytes plus BOS.
    """
    texts: list[str] = []
    generated = 0
    finish = FinishReason.ABORT
    for event in events:
        texts.append(event.text)
        generated += event.finish_reason is not FinishReason.ABORT
        if event.finish_reason is not None:
            finish = event.finish_reason
    prompt_tokens = count_prompt_tokens(request.prompt)
    return CompletionResult(request.request_id, "".join(texts), prompt_tokens, generated, finish)

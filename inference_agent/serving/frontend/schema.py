"""The request bodies of the serving API (CONTRACT section 11), validated once for the front end and the replicas.

A bad body raises ``BadRequest`` naming the field; both servers answer it as 422. Completions and chat completions
follow the OpenAI shapes; the classifier takes 3×64×64 images with values in 0..1.

The built-in engine has no chat template: a chat's messages are rendered one per line as ``role: content`` and the
prompt ends with ``assistant:``, the turn it generates (``render_chat``). A message's content is a string or a list
of ``{"type": "text", "text": ...}`` parts, joined. ``max_completion_tokens`` (OpenAI's current name) wins over
``max_tokens``; both default to 16. What makes an engine generate more is checked too, for the front end to charge
it (``sequences``): ``n`` and ``best_of`` (1 to ``MAX_SEQUENCES``, ``best_of`` at least ``n``), ``min_tokens`` (at
most ``max_tokens``) and ``ignore_eos``.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from math import isnan
from typing import Any

from inference_agent.torch_runtime.api import CompletionResult

MAX_TOKENS_LIMIT = 4096
MAX_PROMPT_BYTES = 64 * 1024
MAX_IMAGES = 64
MAX_MESSAGES = 256
CHAT_ROLES = frozenset({"system", "developer", "user", "assistant", "tool"})
DEFAULT_MAX_TOKENS = 16
MAX_SEQUENCES = 16  # n or best_of: 16 sequences of 4,096 tokens are 65,536 tokens of one request's generation
IMAGE_SHAPE = (3, 64, 64)
# a body's JSON, bounded before it is decoded: the largest classify request has 786,432 numbers in 12,546 arrays,
# nested 5 deep; 2 M numbers decoded would hold ~64 MB of floats, 100,000 empty arrays ~6 MB for a 300 KB body
MAX_JSON_DEPTH = 64
MAX_JSON_VALUES = 1024 * 1024
MAX_JSON_CONTAINERS = 65536
NUMBER_TYPES = {int, float}  # what JSON numbers parse to (a bool is neither)


class BadRequest(ValueError):
    """A request body the API cannot take; ``field`` names the offending part."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message

    def body(self) -> dict[str, Any]:
        return {"detail": [{"loc": ["body", *self.field.split(".")], "msg": self.message}]}


@dataclass(frozen=True)
class CompletionBody:
    model: str
    prompt: str
    max_tokens: int
    stream: bool
    sequences: int = 1  # what the engine generates, each up to max_tokens: best_of, else n


@dataclass(frozen=True)
class ChatMessage:
    role: str
    content: str


@dataclass(frozen=True)
class ChatBody:
    model: str
    messages: tuple[ChatMessage, ...]
    max_tokens: int
    stream: bool
    sequences: int = 1

    @property
    def prompt(self) -> str:
        return render_chat(self.messages)

    @property
    def content_bytes(self) -> int:
        """What the front end charges for the prompt: the messages' content, not the roles the rendering adds."""
        return sum(len(m.content.encode()) for m in self.messages)


@dataclass(frozen=True)
class ClassifyBody:
    model: str
    inputs: list[list[list[list[float]]]]


def parse_json(raw: bytes) -> dict[str, Any]:
    """The body as a JSON object, refused (naming the bound) past ``MAX_JSON_VALUES`` values, ``MAX_JSON_CONTAINERS``
    arrays and objects or ``MAX_JSON_DEPTH`` levels. The counts are taken over the raw bytes before decoding
    (brackets and commas inside strings count too: an over-count, never an under-count)."""
    containers = raw.count(b"[") + raw.count(b"{")
    if containers > MAX_JSON_CONTAINERS:
        raise BadRequest("body", f"more than {MAX_JSON_CONTAINERS} arrays and objects")
    if raw.count(b",") + 1 > MAX_JSON_VALUES:
        raise BadRequest("body", f"more than {MAX_JSON_VALUES} values")
    try:
        body = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise BadRequest("body", f"not JSON: {exc}") from None
    except RecursionError:  # nested past the decoder's own limit (about 1,000 levels)
        raise BadRequest("body", f"nested deeper than {MAX_JSON_DEPTH} levels") from None
    if containers > MAX_JSON_DEPTH and _deeper_than(body, MAX_JSON_DEPTH):
        raise BadRequest("body", f"nested deeper than {MAX_JSON_DEPTH} levels")
    if not isinstance(body, dict):
        raise BadRequest("body", "expected a JSON object")
    return body


def _deeper_than(value: Any, depth: int) -> bool:
    """Whether ``value`` nests more than ``depth`` arrays and objects, walked level by level without recursion."""
    level: list[Any] = [value] if isinstance(value, dict | list) else []
    for _ in range(depth):
        children: list[Any] = []
        for node in level:
            items = node.values() if isinstance(node, dict) else node
            if not _CONTAINERS.isdisjoint(map(type, items)):  # a row of 64 numbers is skipped at C speed
                children.extend(c for c in items if isinstance(c, dict | list))
        if not children:
            return False
        level = children
    return True


_CONTAINERS = frozenset({dict, list})


def model_of(body: dict[str, Any]) -> str:
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise BadRequest("model", "the pool's name (a non-empty string) is required")
    return model


def parse_completion(body: dict[str, Any]) -> CompletionBody:
    model = model_of(body)
    prompt = body.get("prompt")
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str):
        prompt = prompt[0]  # OpenAI clients may send a one-element batch
    if not isinstance(prompt, str):
        raise BadRequest("prompt", "a string is required")
    if len(prompt.encode()) > MAX_PROMPT_BYTES:
        raise BadRequest("prompt", f"longer than {MAX_PROMPT_BYTES} bytes")
    max_tokens = _max_tokens(body, "max_tokens")
    return CompletionBody(model, prompt, max_tokens, _stream(body), _sequences(body, max_tokens))


def parse_chat(body: dict[str, Any]) -> ChatBody:
    model = model_of(body)
    messages = body.get("messages")
    if not isinstance(messages, list) or not 1 <= len(messages) <= MAX_MESSAGES:
        raise BadRequest("messages", f"a list of 1 to {MAX_MESSAGES} messages")
    parsed = tuple(_message(f"messages.{i}", m) for i, m in enumerate(messages))
    if len(render_chat(parsed).encode()) > MAX_PROMPT_BYTES:
        raise BadRequest("messages", f"longer than {MAX_PROMPT_BYTES} bytes once rendered")
    field = "max_completion_tokens" if body.get("max_completion_tokens") is not None else "max_tokens"
    max_tokens = _max_tokens(body, field)
    return ChatBody(model, parsed, max_tokens, _stream(body), _sequences(body, max_tokens))


def render_chat(messages: tuple[ChatMessage, ...]) -> str:
    """``[system "Be brief", user "Hi"]`` → ``"system: Be brief\nuser: Hi\nassistant:"``."""
    return "".join(f"{m.role}: {m.content}\n" for m in messages) + "assistant:"


def _message(where: str, message: Any) -> ChatMessage:
    if not isinstance(message, dict):
        raise BadRequest(where, "an object with role and content")
    role = message.get("role")
    if role not in CHAT_ROLES:
        raise BadRequest(f"{where}.role", f"one of {sorted(CHAT_ROLES)}")
    content = message.get("content")
    if content is None and role == "assistant":
        content = ""  # an assistant turn that only called tools
    if isinstance(content, list) and all(_is_text_part(part) for part in content):
        content = "".join(part["text"] for part in content)
    if not isinstance(content, str):
        raise BadRequest(f"{where}.content", 'a string or a list of {"type": "text", "text": ...} parts')
    return ChatMessage(role, content)


def _is_text_part(part: Any) -> bool:
    return isinstance(part, dict) and part.get("type") == "text" and isinstance(part.get("text"), str)


def _max_tokens(body: dict[str, Any], field: str) -> int:
    value = body.get(field)
    value = DEFAULT_MAX_TOKENS if value is None else value
    if _not_int(value) or not 1 <= value <= MAX_TOKENS_LIMIT:
        raise BadRequest(field, f"an integer from 1 to {MAX_TOKENS_LIMIT}")
    return value


def _sequences(body: dict[str, Any], max_tokens: int) -> int:
    """How many sequences the engine generates, each up to ``max_tokens``: ``best_of`` (answering ``n`` of them),
    else ``n``. ``min_tokens`` and ``ignore_eos`` make it generate up to ``max_tokens``, never past it."""
    n, best_of = _count(body, "n"), _count(body, "best_of")
    if body.get("best_of") is not None and best_of < n:
        raise BadRequest("best_of", f"at least n ({n}): the engine answers n of its best_of sequences")
    min_tokens = body.get("min_tokens")
    if min_tokens is not None and (_not_int(min_tokens) or not 0 <= min_tokens <= max_tokens):
        raise BadRequest("min_tokens", f"an integer from 0 to max_tokens ({max_tokens})")
    if body.get("ignore_eos") is not None and not isinstance(body["ignore_eos"], bool):
        raise BadRequest("ignore_eos", "true or false")
    return max(n, best_of)


def _count(body: dict[str, Any], field: str) -> int:
    value = body.get(field)
    if value is None:
        return 1
    if _not_int(value) or not 1 <= value <= MAX_SEQUENCES:
        raise BadRequest(field, f"an integer from 1 to {MAX_SEQUENCES}")
    return int(value)


def _not_int(value: Any) -> bool:
    return isinstance(value, bool) or not isinstance(value, int)


def _stream(body: dict[str, Any]) -> bool:
    stream = body.get("stream", False)
    if not isinstance(stream, bool):
        raise BadRequest("stream", "true or false")
    return stream


def parse_classify(body: dict[str, Any]) -> ClassifyBody:
    model = model_of(body)
    inputs = body.get("inputs")
    if not isinstance(inputs, list) or not 1 <= len(inputs) <= MAX_IMAGES:
        raise BadRequest("inputs", f"a list of 1 to {MAX_IMAGES} images")
    for i, image in enumerate(inputs):
        _check_image(f"inputs.{i}", image)
    return ClassifyBody(model, inputs)


def _check_image(where: str, image: Any) -> None:
    channels, height, width = IMAGE_SHAPE
    shape_error = BadRequest(where, f"an image of {channels}×{height}×{width} numbers in 0..1")
    if not isinstance(image, list) or len(image) != channels:
        raise shape_error
    for plane in image:
        if not isinstance(plane, list) or len(plane) != height:
            raise shape_error
        for row in plane:
            if not isinstance(row, list) or len(row) != width:
                raise shape_error
            # builtins over each row, not a Python loop over its values (4.2 → 1.7 ms an image on 2 cores): exact types
            # leave bools out; a NaN fails the range check when min or max returns it (first in the row), else the sum
            if not set(map(type, row)) <= NUMBER_TYPES or not 0.0 <= min(row) <= max(row) <= 1.0 or isnan(sum(row)):
                raise shape_error


def completion_answer(result: CompletionResult, model: str, created: int | None = None) -> dict[str, Any]:
    """The OpenAI completions answer for one finished request."""
    return {
        "id": result.request_id,
        "object": "text_completion",
        "created": created if created is not None else int(time.time()),
        "model": model,
        "choices": [{"text": result.text, "index": 0, "logprobs": None, "finish_reason": result.finish_reason.value}],
        "usage": {
            "prompt_tokens": result.prompt_tokens,
            "completion_tokens": result.completion_tokens,
            "total_tokens": result.prompt_tokens + result.completion_tokens,
        },
    }


def completion_chunk(request_id: str, model: str, created: int, text: str, finish_reason: str | None) -> bytes:
    """One server-sent event of a streamed completion."""
    chunk = {
        "id": request_id,
        "object": "text_completion",
        "created": created,
        "model": model,
        "choices": [{"text": text, "index": 0, "logprobs": None, "finish_reason": finish_reason}],
    }
    return _event(chunk)


def chat_answer(result: CompletionResult, model: str, created: int | None = None) -> dict[str, Any]:
    """The OpenAI chat completions answer for one finished request."""
    message = {"role": "assistant", "content": result.text}
    return {
        "id": result.request_id,
        "object": "chat.completion",
        "created": created if created is not None else int(time.time()),
        "model": model,
        "choices": [{"index": 0, "message": message, "logprobs": None, "finish_reason": result.finish_reason.value}],
        "usage": {
            "prompt_tokens": result.prompt_tokens,
            "completion_tokens": result.completion_tokens,
            "total_tokens": result.prompt_tokens + result.completion_tokens,
        },
    }


def chat_chunk(request_id: str, model: str, created: int, delta: dict[str, str], finish_reason: str | None) -> bytes:
    """One server-sent event of a streamed chat completion: the first carries the role, the last the finish."""
    chunk = {
        "id": request_id,
        "object": "chat.completion.chunk",
        "created": created,
        "model": model,
        "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}],
    }
    return _event(chunk)


def error_event(message: str, code: int = 502) -> bytes:
    """The event that ends a stream which cannot finish (OpenAI's error shape); no ``[DONE]`` follows it."""
    return _event({"error": {"message": message, "type": "server_error", "param": None, "code": code}})


def _event(payload: dict[str, Any]) -> bytes:
    return b"data: " + json.dumps(payload, separators=(",", ":")).encode() + b"\n\n"


SSE_DONE = b"data: [DONE]\n\n"

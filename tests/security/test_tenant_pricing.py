"""Issue 35 #7, what a request is charged: every field an engine honours that makes it generate more (``n``,
``best_of``, ``max_tokens`` / ``max_completion_tokens``), and no engine default left to differ from the charge — a
request without ``max_tokens`` reaches an engine with the 16 it was charged, not vLLM's "to the end of the context".
Pure cases through ``route``, then the real front end over a replica that records what it was sent."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any, ClassVar

import httpx
import pytest

from inference_agent.http_server import JsonHandler, Server
from inference_agent.serving.frontend.admission import Quota, QuotaBook, TenantPolicy
from inference_agent.serving.frontend.model_routes import route
from inference_agent.serving.frontend.schema import MAX_SEQUENCES, BadRequest
from inference_agent.serving.frontend.server import Frontend
from inference_agent.serving.routing import Endpoint, PoolRoutes
from wire.control import key_digest

LLAMA = "meta-llama/Llama-3.1-8B-Instruct"
ROUTES = {"demo": PoolRoutes("text"), "chat": PoolRoutes("text", served_model=LLAMA, engine="vllm")}
HI = [{"role": "user", "content": "hi"}]


@pytest.mark.parametrize(
    ("path", "body", "cost"),
    [
        ("/v1/completions", {"model": "demo", "prompt": "hi", "max_tokens": 50}, 2 + 50),
        # the engine generates best_of sequences and answers n of them: 128 × 50 was charged 52
        ("/v1/completions", {"model": "chat", "prompt": "hi", "max_tokens": 50, "n": 4, "best_of": 8}, 2 + 8 * 50),
        ("/v1/completions", {"model": "chat", "prompt": "hi", "max_tokens": 50, "n": 16}, 2 + 16 * 50),
        ("/v1/chat/completions", {"model": "chat", "messages": HI, "n": 3}, 2 + 3 * 16),
        ("/v1/chat/completions", {"model": "chat", "messages": HI, "max_completion_tokens": 9, "n": 2}, 2 + 2 * 9),
        # min_tokens and ignore_eos make it generate up to max_tokens, which is charged already
        ("/v1/completions", {"model": "chat", "prompt": "hi", "max_tokens": 7, "min_tokens": 7, "ignore_eos": True}, 9),
    ],
)
def test_the_cost_counts_every_sequence_the_engine_generates(path: str, body: dict[str, Any], cost: int) -> None:
    assert route(path, body, json.dumps(body).encode(), ROUTES).cost_tokens == cost


@pytest.mark.parametrize(
    ("body", "field", "bound"),
    [
        ({"n": 128, "best_of": 128}, "n", f"1 to {MAX_SEQUENCES}"),
        ({"best_of": 0}, "best_of", f"1 to {MAX_SEQUENCES}"),
        ({"n": 4, "best_of": 2}, "best_of", "at least n"),
        ({"n": True}, "n", f"1 to {MAX_SEQUENCES}"),
        ({"max_tokens": 5, "min_tokens": 6}, "min_tokens", "0 to max_tokens"),
        ({"ignore_eos": "yes"}, "ignore_eos", "true or false"),
    ],
)
def test_generation_fields_out_of_bounds_are_refused_naming_them(body: dict[str, Any], field: str, bound: str) -> None:
    full = {"model": "chat", "prompt": "hi", **body}
    with pytest.raises(BadRequest) as refused:
        route("/v1/completions", full, json.dumps(full).encode(), ROUTES)
    assert refused.value.field == field and bound in refused.value.message


def test_an_engine_is_sent_the_max_tokens_it_was_charged_for() -> None:
    body = {"model": "chat", "messages": HI}
    routed = route("/v1/chat/completions", body, json.dumps(body).encode(), ROUTES)
    assert json.loads(routed.body)["max_tokens"] == 16 and routed.cost_tokens == 2 + 16
    given = {"model": LLAMA, "prompt": "hi", "max_tokens": 5}
    raw = json.dumps(given).encode()
    assert route("/v1/completions", given, raw, ROUTES).body is raw  # named and bounded already: passed unchanged


class Recording(JsonHandler):
    """A replica that answers every completion at once and keeps the bodies it was sent."""

    bodies: ClassVar[list[dict[str, Any]]] = []

    def on_post(self, path: str, body: bytes) -> None:
        self.bodies.append(json.loads(body))
        usage = {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}
        self.answer_json(200, {"object": "text_completion", "choices": [{"text": "x"}], "usage": usage})


KEY = "fp_tenant_priced-tenant-key"


@pytest.fixture
def priced() -> Iterator[Frontend]:
    Recording.bodies = []
    replica = Server("127.0.0.1", 0, Recording, "recording")
    replica.start()
    routes = {"chat": PoolRoutes("text", (Endpoint("chat-1", replica.port),), served_model=LLAMA, engine="vllm")}
    quota = Quota(tokens_per_second=100.0, token_burst=1000.0)
    book = QuotaBook({"t": TenantPolicy(quotas={"chat": quota})})
    frontend = Frontend(lambda: routes, quotas=book, keys={key_digest(KEY): "t"})
    frontend.start()
    yield frontend
    frontend.close()
    replica.close()


def test_n_and_best_of_are_charged_through_the_front_end(priced: Frontend) -> None:
    url = f"http://127.0.0.1:{priced.port}/v1/completions"
    auth = {"Authorization": f"Bearer {KEY}"}
    many = {"model": "chat", "prompt": "hi", "max_tokens": 50, "n": 16, "best_of": 16}
    assert httpx.post(url, json=many, headers=auth).status_code == 200  # 2 + 16 × 50 = 802 of its 1,000
    again = httpx.post(url, json=many, headers=auth)
    assert again.status_code == 429, again.text  # used to be charged 52: twenty of these fit in one burst
    assert "tokens/s" in again.json()["detail"] and int(again.headers["Retry-After"]) >= 6


def test_a_chat_without_max_tokens_reaches_the_engine_with_the_charged_16(priced: Frontend) -> None:
    url = f"http://127.0.0.1:{priced.port}/v1/chat/completions"
    answer = httpx.post(url, json={"model": "chat", "messages": HI}, headers={"Authorization": f"Bearer {KEY}"})
    assert answer.status_code == 200, answer.text
    (sent,) = Recording.bodies
    assert sent["max_tokens"] == 16 and sent["model"] == LLAMA  # vLLM would otherwise generate to its context's end

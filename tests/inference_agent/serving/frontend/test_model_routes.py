"""Which pool a request's model names, the body passed on to an engine that knows only its own model, the token
cost, and the /v1/models listing."""

from __future__ import annotations

import json
from typing import Any

import pytest

from inference_agent.serving.frontend.model_routes import UnknownModel, model_list, pool_for, route
from inference_agent.serving.frontend.schema import BadRequest
from inference_agent.serving.routing import PoolRoutes

LLAMA = "meta-llama/Llama-3.1-8B-Instruct"
ROUTES = {
    "chat": PoolRoutes("text", served_model=LLAMA),
    "demo": PoolRoutes("text"),
    "img": PoolRoutes("classify"),
    "qwen-a": PoolRoutes("text", served_model="qwen"),
    "qwen-b": PoolRoutes("text", served_model="qwen"),
}


@pytest.mark.parametrize(
    ("model", "pool"),
    [("chat", "chat"), (LLAMA, "chat"), ("demo", "demo"), ("qwen-a", "qwen-a")],
)
def test_a_model_names_a_pool_or_the_model_one_pool_serves(model: str, pool: str) -> None:
    assert pool_for(model, ROUTES) == pool


@pytest.mark.parametrize(("model", "why"), [("qwen", "served by pools"), ("nope", "unknown pool or model")])
def test_a_model_no_pool_or_two_pools_serve_is_unknown(model: str, why: str) -> None:
    with pytest.raises(UnknownModel, match=why):
        pool_for(model, ROUTES)


def test_the_body_passed_on_names_the_served_model() -> None:
    body = {"model": "chat", "messages": [{"role": "user", "content": "héllo"}], "max_tokens": 10, "stream": True}
    routed = route("/v1/chat/completions", body, json.dumps(body).encode(), ROUTES)
    assert (routed.pool, routed.stream, routed.cost_tokens) == ("chat", True, len("héllo".encode()) + 10)
    assert json.loads(routed.body) == {**body, "model": LLAMA}


def test_a_body_already_naming_its_model_or_a_pool_without_one_passes_unchanged() -> None:
    for body in (
        {"model": LLAMA, "prompt": "abc", "max_tokens": 2},
        {"model": "demo", "prompt": "abc", "max_tokens": 2},
    ):
        raw = json.dumps(body).encode()
        routed = route("/v1/completions", body, raw, ROUTES)
        assert routed.body is raw and routed.cost_tokens == 5


@pytest.mark.parametrize(
    ("path", "body", "error"),
    [
        ("/v1/classify", {"model": "chat", "inputs": []}, UnknownModel),  # chat generates text
        ("/v1/chat/completions", {"model": "img", "messages": []}, UnknownModel),
        ("/v1/chat/completions", {"model": "chat", "messages": []}, BadRequest),
        ("/v1/completions", {"model": "nope", "prompt": "x"}, UnknownModel),
    ],
)
def test_refusals(path: str, body: dict[str, Any], error: type[Exception]) -> None:
    with pytest.raises(error):
        route(path, body, b"", ROUTES)


def test_models_lists_pools_then_the_models_that_name_one() -> None:
    listed = {m["id"]: (m["root"], m["parent"]) for m in model_list(ROUTES)}
    assert listed == {
        "chat": (LLAMA, None),
        "demo": ("demo", None),
        "img": ("img", None),
        "qwen-a": ("qwen", None),
        "qwen-b": ("qwen", None),
        LLAMA: (LLAMA, "chat"),  # qwen names no single pool: not listed
    }

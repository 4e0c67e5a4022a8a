"""Which pool a request's ``model`` names, what goes on to the replica, what it costs, and what ``/v1/models`` lists.

A request's ``model`` is a pool's name, or the model a pool serves (``PoolRoutes.served_model``, an engine
profile's model) when exactly one pool on the node serves it. When the pool has a served model the body passed on
names that model instead: a vLLM answers 404 to any other name. A request is charged its prompt and ``max_tokens``
for each sequence the engine generates (``n``, ``best_of``), and an engine of a profile is sent the ``max_tokens``
charged when the request names none (16): left out, vLLM would generate to the end of its context. Pure functions
of the body and the routes, for the front end (``server.py``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from inference_agent.serving.frontend.schema import ChatBody, model_of, parse_chat, parse_classify, parse_completion
from inference_agent.serving.routing import PoolRoutes

# path → the kind of pool that answers it
ROUTES = {"/v1/completions": "text", "/v1/chat/completions": "text", "/v1/classify": "classify"}


class UnknownModel(Exception):
    """No pool on this node answers the request's ``model`` at this path (answered 404)."""


@dataclass(frozen=True)
class Routed:
    """A valid request for one pool: whether it streams, its token cost, and the body to pass on."""

    pool: str
    stream: bool
    cost_tokens: int  # prompt bytes (a chat's content bytes) + sequences × max tokens; 0 for classify
    body: bytes


def route(path: str, body: dict[str, Any], raw: bytes, routes: Mapping[str, PoolRoutes]) -> Routed:
    """The request's pool and what to pass on; raises BadRequest (422) for the body, UnknownModel (404)."""
    pool = pool_for(model_of(body), routes)
    known = routes[pool]
    if known.kind != ROUTES[path]:
        raise UnknownModel(f"pool {pool!r} serves {known.kind}, not {path}")
    stream, cost = False, 0
    updates: dict[str, Any] = {}  # what the body passed on says otherwise
    if path == "/v1/classify":
        parse_classify(body)
    else:
        text = parse_completion(body) if path == "/v1/completions" else parse_chat(body)
        prompt_bytes = text.content_bytes if isinstance(text, ChatBody) else len(text.prompt.encode())
        stream, cost = text.stream, prompt_bytes + text.sequences * text.max_tokens
        if known.engine is not None and body.get("max_tokens") is None and body.get("max_completion_tokens") is None:
            updates["max_tokens"] = text.max_tokens
    if known.served_model is not None and body["model"] != known.served_model:
        updates["model"] = known.served_model
    if updates:
        raw = json.dumps({**body, **updates}).encode()
    return Routed(pool, stream, cost, raw)


def pool_for(model: str, routes: Mapping[str, PoolRoutes]) -> str:
    """The pool ``model`` names: a pool's own name first, else the one pool that serves that model."""
    if model in routes:
        return model
    serving = sorted(name for name, r in routes.items() if r.served_model == model)
    if len(serving) == 1:
        return serving[0]
    if serving:
        raise UnknownModel(f"model {model!r} is served by pools {serving}: name one of them")
    raise UnknownModel(f"unknown pool or model {model!r}: this node serves {sorted(routes)}")


def model_list(routes: Mapping[str, PoolRoutes]) -> list[dict[str, Any]]:
    """``/v1/models``' data: each pool (``root``: the model it serves), then each served model that names a pool
    (``parent``: that pool; a model two pools serve is left out, as it names neither)."""
    pools = [_model(name, root=r.served_model or name) for name, r in sorted(routes.items())]
    served = [(r.served_model, name) for name, r in sorted(routes.items()) if r.served_model not in (None, name)]
    names = [model for model, _ in served]
    aliases = [
        _model(model, root=model, parent=pool)
        for model, pool in served
        if model is not None and names.count(model) == 1 and model not in routes
    ]
    return pools + aliases


def _model(name: str, *, root: str, parent: str | None = None) -> dict[str, Any]:
    return {"id": name, "object": "model", "owned_by": "fleetpilot", "root": root, "parent": parent}

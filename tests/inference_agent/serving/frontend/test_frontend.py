"""The serving front end over in-process replicas: routing to the least loaded, priority order, 404/422/429/503."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator

import httpx
import pytest

from inference_agent.serving.frontend.admission import Quota, QuotaBook, TenantPolicy
from inference_agent.serving.frontend.dispatch import Dispatcher, NoCapacity, least_loaded
from inference_agent.serving.frontend.server import Frontend, FrontendLimits
from inference_agent.serving.routing import Endpoint, PoolRoutes
from inference_agent.torch_runtime.api import CompletionRequest, Priority, TokenEvent
from tests.inference_agent.serving.conftest import StartReplica
from tests.support.waiting import wait_for
from wire.control import SloClass, key_digest

A, B, C = Endpoint("a", 1), Endpoint("b", 2), Endpoint("c", 3)
T_KEY = "fp_tenant_the-key-of-t"
T = {"Authorization": f"Bearer {T_KEY}"}
KEYS = {key_digest(T_KEY): "t"}


@pytest.mark.parametrize(
    ("in_flight", "limit", "rotation", "pick"),
    [
        ({"a": 2, "b": 1, "c": 3}, 8, 0, B),
        ({"a": 1, "b": 1}, 8, 0, A),
        ({"a": 1, "b": 1}, 8, 1, B),  # ties rotate
        ({"a": 8, "b": 8, "c": 7}, 8, 0, C),
        ({"a": 8, "b": 8, "c": 8}, 8, 0, None),  # all full
    ],
)
def test_least_loaded(in_flight: dict[str, int], limit: int, rotation: int, pick: Endpoint | None) -> None:
    endpoints = tuple(e for e in (A, B, C) if e.replica_id in in_flight)
    assert least_loaded(endpoints, in_flight, limit, rotation) == pick


def wait_until(condition: Callable[[], bool], timeout_s: float = 5.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.005)


def test_latency_critical_overtakes_queued_batch_requests() -> None:
    dispatcher = Dispatcher(max_in_flight=1, max_queue=10)
    held = dispatcher.acquire("p", lambda: (A,), Priority.STANDARD, 1.0)
    order: list[str] = []

    def wait(name: str, priority: Priority) -> None:
        endpoint = dispatcher.acquire("p", lambda: (A,), priority, 5.0)
        order.append(name)
        dispatcher.release(endpoint)

    threads = [threading.Thread(target=wait, args=("batch", Priority.BATCH))]
    threads[0].start()
    wait_until(lambda: dispatcher.queued("p") == 1)
    threads.append(threading.Thread(target=wait, args=("critical", Priority.LATENCY_CRITICAL)))
    threads[1].start()
    wait_until(lambda: dispatcher.queued("p") == 2)
    dispatcher.release(held)
    for thread in threads:
        thread.join(5)
    assert order == ["critical", "batch"]


def test_a_full_queue_and_no_replica_are_refused() -> None:
    dispatcher = Dispatcher(max_in_flight=1, max_queue=0)
    dispatcher.acquire("p", lambda: (A,), Priority.STANDARD, 1.0)
    with pytest.raises(NoCapacity, match="overloaded"):
        dispatcher.acquire("p", lambda: (A,), Priority.STANDARD, 1.0)
    with pytest.raises(NoCapacity, match="no ready replica"):
        dispatcher.acquire("q", tuple, Priority.STANDARD, 1.0)


class Routes:
    def __init__(self) -> None:
        self.pools: dict[str, PoolRoutes] = {}

    def __call__(self) -> dict[str, PoolRoutes]:
        return self.pools


@pytest.fixture
def routes() -> Routes:
    return Routes()


@pytest.fixture
def make_frontend(routes: Routes) -> Iterator[Callable[..., Frontend]]:
    made: list[Frontend] = []

    def make(**kwargs: object) -> Frontend:
        frontend = Frontend(routes, **kwargs)  # type: ignore[arg-type]
        frontend.start()
        made.append(frontend)
        return frontend

    yield make
    for frontend in made:
        frontend.close()


def url(frontend: Frontend, path: str = "/v1/completions") -> str:
    return f"http://127.0.0.1:{frontend.port}{path}"


def test_routes_to_the_least_loaded_replica(
    routes: Routes, make_frontend: Callable[..., Frontend], start_replica: StartReplica
) -> None:
    first, a = start_replica("p", name="a", token_delay_s=0.01)
    second, b = start_replica("p", name="b", token_delay_s=0.01)
    routes.pools["p"] = PoolRoutes("text", (a, b))
    frontend = make_frontend()
    long = threading.Thread(
        target=httpx.post, args=(url(frontend),), kwargs={"json": {"model": "p", "prompt": "x", "max_tokens": 100}}
    )
    long.start()
    wait_until(lambda: first.ledger.in_flight + second.ledger.in_flight == 1)
    busy, idle = (first, second) if first.ledger.in_flight else (second, first)
    for _ in range(3):
        answer = httpx.post(url(frontend), json={"model": "p", "prompt": "hello", "max_tokens": 2})
        assert answer.status_code == 200
    assert (busy.ledger.arrived, idle.ledger.arrived) == (1, 3)
    long.join(10)
    body = answer.json()
    assert body["object"] == "text_completion" and body["model"] == "p"
    assert body["usage"] == {"prompt_tokens": 6, "completion_tokens": 2, "total_tokens": 8}  # 5 bytes + BOS


def test_streams_through_the_front_end(
    routes: Routes, make_frontend: Callable[..., Frontend], start_replica: StartReplica
) -> None:
    _, a = start_replica("p")
    routes.pools["p"] = PoolRoutes("text", (a,))
    frontend = make_frontend()
    body = {"model": "p", "prompt": "hi", "max_tokens": 4, "stream": True}
    with httpx.stream("POST", url(frontend), json=body) as answer:
        assert answer.status_code == 200
        assert answer.headers["content-type"] == "text/event-stream"
        events = [line for line in answer.iter_lines() if line]
    assert events[-1] == "data: [DONE]"
    chunks = [json.loads(e.removeprefix("data: ")) for e in events[:-1]]
    assert len(chunks) == 4
    assert [c["choices"][0]["finish_reason"] for c in chunks] == [None, None, None, "length"]


def test_classify_through_the_front_end(
    routes: Routes, make_frontend: Callable[..., Frontend], start_replica: StartReplica
) -> None:
    _, c = start_replica("img", "classify")
    routes.pools["img"] = PoolRoutes("classify", (c,))
    frontend = make_frontend()
    image = [[[0.55] * 64] * 64] * 3
    answer = httpx.post(url(frontend, "/v1/classify"), json={"model": "img", "inputs": [image]})
    assert answer.status_code == 200
    assert answer.json() == {"model": "img", "results": [{"label": 5, "score": pytest.approx(0.775)}]}
    bad = httpx.post(url(frontend, "/v1/classify"), json={"model": "img", "inputs": [[[0.5]]]})
    assert bad.status_code == 422 and bad.json()["detail"][0]["loc"] == ["body", "inputs", "0"]


@pytest.mark.parametrize(
    ("path", "body", "code", "field"),
    [
        ("/v1/completions", {"model": "nope", "prompt": "x"}, 404, None),
        ("/v1/classify", {"model": "p", "inputs": []}, 404, None),  # p generates text
        ("/v1/completions", {"prompt": "x"}, 422, "model"),
        ("/v1/completions", {"model": "p"}, 422, "prompt"),
        ("/v1/completions", {"model": "p", "prompt": "x", "max_tokens": 0}, 422, "max_tokens"),
        ("/v1/completions", {"model": "p", "prompt": "x", "stream": "yes"}, 422, "stream"),
        ("/v1/embeddings", {"model": "p"}, 404, None),
    ],
)
def test_contract_errors(
    routes: Routes,
    make_frontend: Callable[..., Frontend],
    start_replica: StartReplica,
    path: str,
    body: dict[str, object],
    code: int,
    field: str | None,
) -> None:
    _, a = start_replica("p")
    routes.pools["p"] = PoolRoutes("text", (a,))
    answer = httpx.post(url(make_frontend(), path), json=body)
    assert answer.status_code == code
    if field is not None:
        assert answer.json()["detail"][0]["loc"] == ["body", field]


def test_not_json_is_422(routes: Routes, make_frontend: Callable[..., Frontend]) -> None:
    answer = httpx.post(url(make_frontend()), content=b"{nope")
    assert answer.status_code == 422


def test_over_quota_is_429_with_retry_after(
    routes: Routes, make_frontend: Callable[..., Frontend], start_replica: StartReplica
) -> None:
    _, a = start_replica("p")
    routes.pools["p"] = PoolRoutes("text", (a,))
    book = QuotaBook({"t": TenantPolicy(SloClass.BATCH, {"p": Quota(rate_rps=0.25, burst=1.0)})})
    frontend = make_frontend(quotas=book, keys=KEYS)
    body = {"model": "p", "prompt": "x", "max_tokens": 1}
    assert httpx.post(url(frontend), json=body, headers=T).status_code == 200
    refused = httpx.post(url(frontend), json=body, headers=T)
    assert refused.status_code == 429
    assert refused.headers["retry-after"] == "4"  # a whole token at 0.25 rps
    assert httpx.post(url(frontend), json=body).status_code == 200  # the anonymous default tenant has its own quota


def test_generation_tokens_over_quota_are_429_and_the_kv_share_reaches_the_engine(
    routes: Routes, make_frontend: Callable[..., Frontend], start_replica: StartReplica
) -> None:
    app, a = start_replica("p")
    seen: list[CompletionRequest] = []
    engine = app.text_engine
    assert engine is not None
    submit = engine.submit

    def recording(request: CompletionRequest) -> Iterator[TokenEvent]:
        seen.append(request)
        return submit(request)

    engine.submit = recording  # type: ignore[method-assign]
    routes.pools["p"] = PoolRoutes("text", (a,))
    quota = Quota(tokens_per_second=10.0, token_burst=20.0, kv_share=0.25)
    frontend = make_frontend(quotas=QuotaBook({"t": TenantPolicy(SloClass.BATCH, {"p": quota})}), keys=KEYS)
    body = {"model": "p", "prompt": "abcd", "max_tokens": 16}  # costs 4 + 16 = 20 tokens: the whole burst
    assert httpx.post(url(frontend), json=body, headers=T).status_code == 200
    refused = httpx.post(url(frontend), json=body, headers=T)
    assert refused.status_code == 429 and "tokens/s" in refused.json()["detail"]
    assert refused.headers["retry-after"] == "2"  # 20 tokens at 10 tokens/s
    assert [(r.tenant, r.kv_share) for r in seen] == [("t", 0.25)]


def test_no_ready_replica_overload_and_draining_are_503(
    routes: Routes, make_frontend: Callable[..., Frontend], start_replica: StartReplica
) -> None:
    routes.pools["p"] = PoolRoutes("text", (), starting=1)
    frontend = make_frontend(limits=FrontendLimits(max_in_flight_per_replica=1, max_queue_per_pool=0))
    body = {"model": "p", "prompt": "x", "max_tokens": 1}
    answer = httpx.post(url(frontend), json=body)
    assert (answer.status_code, answer.headers["retry-after"]) == (503, "1")

    app, a = start_replica("p", token_delay_s=0.02)
    routes.pools["p"] = PoolRoutes("text", (a,))
    long = threading.Thread(target=httpx.post, args=(url(frontend),), kwargs={"json": {**body, "max_tokens": 50}})
    long.start()
    wait_until(lambda: app.ledger.in_flight == 1)
    assert httpx.post(url(frontend), json=body).status_code == 503  # the only slot is taken and no queue
    long.join(10)

    frontend.draining = True
    assert httpx.post(url(frontend), json=body).status_code == 503


def test_a_draining_replica_is_skipped_for_another(
    routes: Routes, make_frontend: Callable[..., Frontend], start_replica: StartReplica
) -> None:
    draining, a = start_replica("p", name="a")
    serving, b = start_replica("p", name="b")
    draining.drain()
    routes.pools["p"] = PoolRoutes("text", (a, b))
    frontend = make_frontend()
    for _ in range(4):
        assert httpx.post(url(frontend), json={"model": "p", "prompt": "x", "max_tokens": 1}).status_code == 200
    wait_for(lambda: serving.ledger.completed == 4)  # a replica counts an answer once it has sent it, a moment after
    assert draining.ledger.arrived == 0


@pytest.mark.parametrize(
    ("in_flight", "waiting", "pick"),
    [
        ({"a": 1, "b": 1}, {"a": 3}, B),  # equal in flight: the engine that queues loses
        ({"a": 2, "b": 0}, {"b": 3}, A),  # 2 + 0 < 0 + 3
        ({"a": 8, "b": 0}, {"b": 50}, B),  # a is at the front end's limit: b, however queued, is the only open one
        ({"a": 1, "b": 1}, {"a": -4}, A),  # a nonsense negative scrape counts as 0: the tie rotates to a
    ],
)
def test_least_loaded_counts_each_engines_own_queue(
    in_flight: dict[str, int], waiting: dict[str, int], pick: Endpoint
) -> None:
    assert least_loaded((A, B), in_flight, 8, 0, lambda replica: waiting.get(replica, 0)) == pick


def test_the_dispatcher_asks_the_waiting_hook() -> None:
    dispatcher = Dispatcher(max_in_flight=4, max_queue=10, waiting=lambda r: {"a": 2}.get(r, 0))
    picks = [dispatcher.acquire("p", lambda: (A, B), Priority.STANDARD, 1.0).replica_id for _ in range(3)]
    assert picks == ["b", "b", "a"]  # b: 0, 1 in flight; then a (0 + 2 waiting) ties b (2) and rotation picks a


def chat(model: str, **extra: object) -> dict[str, object]:
    return {"model": model, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 3, **extra}


def test_chat_completions_plain_and_streamed_through_the_front_end(
    routes: Routes, make_frontend: Callable[..., Frontend], start_replica: StartReplica
) -> None:
    _, a = start_replica("p")
    routes.pools["p"] = PoolRoutes("text", (a,))
    frontend = make_frontend()
    answer = httpx.post(url(frontend, "/v1/chat/completions"), json=chat("p")).json()
    assert answer["object"] == "chat.completion"
    assert answer["choices"][0]["message"]["role"] == "assistant"
    assert len(answer["choices"][0]["message"]["content"]) == 3
    assert answer["usage"]["prompt_tokens"] == len("user: hi\nassistant:") + 1  # the rendered prompt + BOS
    with httpx.stream("POST", url(frontend, "/v1/chat/completions"), json=chat("p", stream=True)) as stream:
        events = [line for line in stream.iter_lines() if line]
    assert events[-1] == "data: [DONE]"
    chunks = [json.loads(e.removeprefix("data: ")) for e in events[:-1]]
    assert {c["object"] for c in chunks} == {"chat.completion.chunk"}
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert (
        "".join(c["choices"][0]["delta"].get("content", "") for c in chunks)
        == answer["choices"][0]["message"]["content"]
    )
    assert [c["choices"][0]["finish_reason"] for c in chunks] == [None, None, None, "length"]


def test_a_pools_served_model_names_it_and_is_what_the_engine_sees(
    routes: Routes, make_frontend: Callable[..., Frontend], start_replica: StartReplica
) -> None:
    _, a = start_replica("chat")
    routes.pools["chat"] = PoolRoutes("text", (a,), served_model="org/model-7b")
    routes.pools["demo"] = PoolRoutes("text", ())
    frontend = make_frontend()
    for name in ("chat", "org/model-7b"):
        answer = httpx.post(url(frontend, "/v1/chat/completions"), json=chat(name))
        assert answer.status_code == 200 and answer.json()["model"] == "org/model-7b"  # the replica echoes its body
        completion = httpx.post(url(frontend), json={"model": name, "prompt": "x", "max_tokens": 1})
        assert completion.json()["model"] == "org/model-7b"
    models = httpx.get(url(frontend, "/v1/models")).json()
    assert [(m["id"], m["root"]) for m in models["data"]] == [
        ("chat", "org/model-7b"),
        ("demo", "demo"),
        ("org/model-7b", "org/model-7b"),
    ]


def test_a_chat_costs_its_content_bytes_and_max_tokens(
    routes: Routes, make_frontend: Callable[..., Frontend], start_replica: StartReplica
) -> None:
    _, a = start_replica("p")
    routes.pools["p"] = PoolRoutes("text", (a,))
    quota = Quota(tokens_per_second=5.0, token_burst=5.0)  # "hi" + 3 = 5 tokens: the whole burst
    frontend = make_frontend(quotas=QuotaBook({"t": TenantPolicy(SloClass.BATCH, {"p": quota})}), keys=KEYS)
    assert httpx.post(url(frontend, "/v1/chat/completions"), json=chat("p"), headers=T).status_code == 200
    refused = httpx.post(url(frontend, "/v1/chat/completions"), json=chat("p"), headers=T)
    assert refused.status_code == 429 and refused.headers["retry-after"] == "1"

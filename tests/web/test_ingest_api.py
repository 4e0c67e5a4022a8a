"""POST /api/v1/ingest (CONTRACT section 5): idempotent, all-or-nothing, every bad input named."""

from __future__ import annotations

import asyncio
import gzip
import json
import math
import re
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import Engine, func, select

from collector.database import make_engine
from collector.errors import Overloaded
from collector.tables import nodes, samples
from fleetpilot.server import build_services
from fleetpilot.settings import ServerSettings
from tests.conftest import gpu_sample, pool_sample
from tests.support.clock import FakeClock
from web.app import create_app
from web.ingest_gate import IngestAdmission, LoopLag
from web.tokens import TokenStore
from wire import columnar

Auth = Callable[..., dict[str, str]]


def stored(engine: Engine, node_id: str = "node-a") -> list[int]:
    with engine.connect() as conn:
        return list(conn.scalars(select(samples.c.seq).where(samples.c.node_id == node_id).order_by(samples.c.seq)))


def batch(*samples_: dict[str, Any], node_id: str = "node-a") -> dict[str, Any]:
    return {"node_id": node_id, "samples": list(samples_)}


def test_accepts_the_contract_example_and_answers_after_commit(
    client: TestClient, auth: Auth, engine: Engine, clock: FakeClock
) -> None:
    body = {
        "node_id": "node-a",
        "samples": [
            {
                "seq": 1041,
                "ts": clock(),
                "device": 0,
                "pool": None,
                "metrics": {"gpu_utilization_ratio": 0.83, "gpu_memory_used_bytes": 61203283968},
                "extra": {"gpu_ecc_volatile_corrected_errors": 3, "gpu_clocks_event_reason_names": ["sw_power_cap"]},
            },
            {
                "seq": 1042,
                "ts": clock(),
                "device": None,
                "pool": "llama-8b",
                "metrics": {"request_rate_per_second": 41.5, "queue_depth_requests": 3},
            },
        ],
    }
    answer = client.post("/api/v1/ingest", json=body, headers=auth("agent", "node-a"))
    assert answer.status_code == 200, answer.text
    assert answer.json() == {"accepted": 2, "duplicates": 0, "desired": None}
    assert stored(engine) == [1041, 1042]
    with engine.connect() as conn:
        row = conn.execute(select(samples).where(samples.c.seq == 1041)).one()._mapping
    assert row["gpu_memory_used_bytes"] == 61203283968
    assert row["gpu_power_watts"] is None  # not measured: absent, never 0
    assert row["extra"] == {"gpu_ecc_volatile_corrected_errors": 3, "gpu_clocks_event_reason_names": ["sw_power_cap"]}


def test_resent_samples_count_as_duplicates_and_are_stored_once(
    client: TestClient, auth: Auth, engine: Engine, clock: FakeClock
) -> None:
    headers = auth("agent", "node-a")
    first = batch(gpu_sample(1, clock()), gpu_sample(2, clock() + 0.5))
    assert client.post("/api/v1/ingest", json=first, headers=headers).json()["accepted"] == 2
    again = batch(gpu_sample(2, clock() + 0.5), gpu_sample(3, clock() + 1.0))
    assert client.post("/api/v1/ingest", json=again, headers=headers).json() == {
        "accepted": 1,
        "duplicates": 1,
        "desired": None,
    }
    assert stored(engine) == [1, 2, 3]


def test_gzip_body_is_accepted(client: TestClient, auth: Auth, engine: Engine, clock: FakeClock) -> None:
    raw = json.dumps(batch(gpu_sample(7, clock()))).encode()
    headers = {**auth("agent", "node-a"), "Content-Encoding": "gzip", "Content-Type": "application/json"}
    answer = client.post("/api/v1/ingest", content=gzip.compress(raw), headers=headers)
    assert answer.status_code == 200, answer.text
    assert stored(engine) == [7]


def _with(sample: dict[str, Any], **changes: Any) -> dict[str, Any]:
    return {**sample, **changes}


def _metrics(**metrics: Any) -> dict[str, Any]:
    return _with(gpu_sample(2, 1_764_424_800.0), metrics=metrics)


BAD_SAMPLES: list[tuple[str, dict[str, Any] | str, str]] = [
    ("unknown metric", _metrics(gpu_fan_speed_ratio=0.5), "metrics.gpu_fan_speed_ratio"),
    ("NaN", _metrics(gpu_utilization_ratio="NaN"), "metrics.gpu_utilization_ratio"),
    ("Infinity", _metrics(gpu_power_watts="Infinity"), "metrics.gpu_power_watts"),
    ("negative", _metrics(gpu_power_watts=-3.0), "metrics.gpu_power_watts"),
    ("ratio above 1", _metrics(gpu_utilization_ratio=1.2), "metrics.gpu_utilization_ratio"),
    (
        "ratio below 0",
        _metrics(gpu_memory_bandwidth_utilization_ratio=-0.1),
        "metrics.gpu_memory_bandwidth_utilization_ratio",
    ),
    ("far future", _with(gpu_sample(2, 1_764_424_800.0 + 301)), "ts"),
    ("seq missing", {k: v for k, v in gpu_sample(2, 1_764_424_800.0).items() if k != "seq"}, "seq"),
    ("seq negative", _with(gpu_sample(2, 1_764_424_800.0), seq=-1), "seq"),
    ("seq a string", _with(gpu_sample(2, 1_764_424_800.0), seq="2"), "seq"),
    ("ts a string", _with(gpu_sample(2, 1_764_424_800.0), ts="yesterday"), "ts"),
    ("metric a string", _metrics(gpu_utilization_ratio="high"), "metrics.gpu_utilization_ratio"),
    ("GPU metric without device", _with(gpu_sample(2, 1_764_424_800.0), device=None), "metrics.gpu_utilization_ratio"),
    ("pool metric without pool", _with(pool_sample(2, 1_764_424_800.0), pool=None), "metrics.request_rate_per_second"),
    ("bad pool name", _with(pool_sample(2, 1_764_424_800.0), pool="has space"), "pool"),
    ("NaN inside extra", _with(gpu_sample(2, 1_764_424_800.0), extra={"ecc": [1, "NaN"]}), "extra.ecc[1]"),
]


@pytest.mark.parametrize(("case", "bad", "field"), BAD_SAMPLES, ids=[c[0] for c in BAD_SAMPLES])
def test_bad_sample_is_rejected_naming_index_and_field_and_nothing_is_stored(
    client: TestClient, auth: Auth, engine: Engine, clock: FakeClock, case: str, bad: dict[str, Any], field: str
) -> None:
    good = gpu_sample(1, clock())
    # JSON has no NaN/Infinity literals by default; write them the way a careless client would.
    text = json.dumps(batch(good, bad)).replace('"NaN"', "NaN").replace('"Infinity"', "Infinity")
    answer = client.post(
        "/api/v1/ingest", content=text, headers={**auth("agent", "node-a"), "Content-Type": "application/json"}
    )
    assert answer.status_code == 422, answer.text
    error = answer.json()["error"]
    problem = error["errors"][0]
    assert (problem["sample"], problem["field"]) == (1, field)
    assert error["code"] == "validation_failed" and error["field"] == f"samples[1].{field}"
    assert f"samples[1].{field}" in error["message"]
    assert stored(engine) == []  # the good sample of the same request is not stored either


@pytest.mark.parametrize(
    ("body", "field"),
    [
        (b"{", "body"),
        (b"[]", "body"),
        (json.dumps({"samples": []}).encode(), "node_id"),
        (json.dumps({"node_id": "node-a"}).encode(), "samples"),
    ],
    ids=["truncated JSON", "not an object", "no node_id", "no samples"],
)
def test_bad_envelope_is_rejected(client: TestClient, auth: Auth, body: bytes, field: str) -> None:
    answer = client.post("/api/v1/ingest", content=body, headers=auth("agent", "node-a"))
    assert answer.status_code == 422
    error = answer.json()["error"]
    assert error["errors"][0]["field"] == error["field"] == field


def test_rejection_keeps_what_was_accepted_before(
    client: TestClient, auth: Auth, engine: Engine, clock: FakeClock
) -> None:
    headers = auth("agent", "node-a")
    client.post("/api/v1/ingest", json=batch(gpu_sample(1, clock())), headers=headers)
    bad = batch(gpu_sample(2, clock()), _metrics(gpu_utilization_ratio=3.0))
    assert client.post("/api/v1/ingest", json=bad, headers=headers).status_code == 422
    assert stored(engine) == [1]


@pytest.mark.parametrize(
    ("headers", "code"),
    [({}, 401), ({"Authorization": "Bearer fp_nope_nope"}, 401), ({"Authorization": "Basic abc"}, 401)],
    ids=["no token", "unknown token", "not bearer"],
)
def test_missing_or_wrong_token_is_401(
    client: TestClient, clock: FakeClock, headers: dict[str, str], code: int
) -> None:
    answer = client.post("/api/v1/ingest", json=batch(gpu_sample(1, clock())), headers=headers)
    assert answer.status_code == code


@pytest.mark.parametrize("role", ["admin", "operator", "viewer"])
def test_token_of_another_role_is_403(client: TestClient, auth: Auth, clock: FakeClock, role: str) -> None:
    answer = client.post("/api/v1/ingest", json=batch(gpu_sample(1, clock())), headers=auth(role))
    assert answer.status_code == 403


def test_agent_token_of_another_node_is_403(client: TestClient, auth: Auth, engine: Engine, clock: FakeClock) -> None:
    answer = client.post(
        "/api/v1/ingest", json=batch(gpu_sample(1, clock()), node_id="node-b"), headers=auth("agent", "node-a")
    )
    assert answer.status_code == 403
    assert "node-b" in answer.json()["error"]["message"]
    assert stored(engine, "node-b") == []


def test_body_over_the_limit_is_413(services: Any, auth: Auth, clock: FakeClock) -> None:
    services.settings = services.settings.model_copy(update={"ingest_max_body_bytes": 2_000})
    big = batch(*[gpu_sample(i, clock()) for i in range(50)])
    with TestClient(create_app(services)) as client:
        headers = auth("agent", "node-a")
        assert client.post("/api/v1/ingest", json=big, headers=headers).status_code == 413
        bomb = gzip.compress(json.dumps(big).encode())
        assert len(bomb) < 2_000  # small on the wire, over the limit once inflated
        gz = {**headers, "Content-Encoding": "gzip", "Content-Type": "application/json"}
        assert client.post("/api/v1/ingest", content=bomb, headers=gz).status_code == 413


def test_corrupt_gzip_is_400(client: TestClient, auth: Auth) -> None:
    headers = {**auth("agent", "node-a"), "Content-Encoding": "gzip"}
    assert client.post("/api/v1/ingest", content=b"\x1f\x8bnot gzip", headers=headers).status_code == 400


def test_database_down_is_503_with_retry_after(auth: Auth, clock: FakeClock, services: Any) -> None:
    """The token check passes (from the cache) and the write finds no database: 503, never a stack trace."""
    token_headers = auth("agent", "node-a")
    cached = TokenStore(services.engine, cache_seconds=60)
    assert cached.verify(token_headers["Authorization"].removeprefix("Bearer "), now=clock()) is not None
    url = "postgresql+psycopg://postgres@127.0.0.1:1/none"  # nothing listens on port 1
    dead = build_services(ServerSettings(database_url=url), make_engine(url, pool_pre_ping=False))
    dead.tokens, dead.clock = cached, clock
    with TestClient(create_app(dead)) as client:
        answer = client.post("/api/v1/ingest", json=batch(gpu_sample(1, clock())), headers=token_headers)
    assert answer.status_code == 503
    assert int(answer.headers["Retry-After"]) > 0
    assert "traceback" not in answer.text.lower()


def test_past_its_in_flight_limit_ingest_is_refused_at_once_and_nothing_is_stored(
    client: TestClient, auth: Auth, engine: Engine, clock: FakeClock, services: Any
) -> None:
    services.ingest_gate = IngestAdmission(1)
    entered_at = services.ingest_gate.enter()  # one batch in progress
    answer = client.post("/api/v1/ingest", json=batch(gpu_sample(1, clock())), headers=auth("agent", "node-a"))
    assert answer.status_code == 503 and 2 <= int(answer.headers["Retry-After"]) <= 6
    assert answer.json()["error"]["code"] == "unavailable" and "overloaded" in answer.json()["error"]["message"]
    assert stored(engine) == []
    rejected = {"reason": "overloaded"}
    assert services.registry.get_sample_value("fleetpilot_collector_rejected_requests_total", rejected) == 1
    services.ingest_gate.leave(entered_at)
    answer = client.post("/api/v1/ingest", json=batch(gpu_sample(1, clock())), headers=auth("agent", "node-a"))
    assert answer.status_code == 200 and stored(engine) == [1]
    assert services.ingest_gate.inside == 0  # every request gave its place back
    bad = client.post("/api/v1/ingest", content=b"not json", headers=auth("agent", "node-a"))
    assert bad.status_code == 422 and services.ingest_gate.inside == 0  # refused ones too


def test_in_flight_limit_needs_a_place() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        IngestAdmission(0)


def test_while_the_oldest_batch_in_progress_has_waited_past_the_bound_ingest_is_shed_at_the_door(
    client: TestClient, auth: Auth, engine: Engine, clock: FakeClock, services: Any
) -> None:
    ahead = [0.0]  # the door's clock runs ahead of the writer's by this much: what is in progress looks older
    services.ingest_gate = IngestAdmission(32, max_queue_seconds=1.0, clock=lambda: time.monotonic() + ahead[0])
    slow = services.ingest_gate.enter()  # a batch in progress (parsing, queued at the writer, committing)
    ahead[0] = 2.5
    answer = client.post("/api/v1/ingest", json=batch(gpu_sample(1, clock())), headers=auth("agent", "node-a"))
    assert answer.status_code == 503 and 2 <= int(answer.headers["Retry-After"]) <= 6
    waited = re.search(r"the oldest batch in progress has waited (\S+) s", answer.json()["error"]["message"])
    assert waited is not None and float(waited[1]) >= 2.5
    assert stored(engine) == [] and services.ingest_gate.inside == 1
    services.ingest_gate.leave(slow)  # it was answered
    answer = client.post("/api/v1/ingest", json=batch(gpu_sample(1, clock())), headers=auth("agent", "node-a"))
    assert answer.status_code == 200 and stored(engine) == [1] and services.ingest_gate.inside == 0


def test_a_batch_past_the_commit_deadline_is_answered_503_and_counted_as_overloaded(
    client: TestClient, auth: Auth, engine: Engine, clock: FakeClock, services: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    def too_late(*_: Any, **__: Any) -> None:
        raise Overloaded("waited 6.0 s for a commit (deadline 5 s)")

    monkeypatch.setattr(services.writer, "write_batch", too_late)
    answer = client.post("/api/v1/ingest", json=batch(gpu_sample(1, clock())), headers=auth("agent", "node-a"))
    assert answer.status_code == 503 and 2 <= int(answer.headers["Retry-After"]) <= 6
    assert "waited 6.0 s for a commit" in answer.json()["error"]["message"]
    rejected = {"reason": "overloaded"}
    assert services.registry.get_sample_value("fleetpilot_collector_rejected_requests_total", rejected) == 1
    assert services.ingest_gate.inside == 0


def test_the_loop_lag_counts_a_probe_the_busy_loop_has_not_woken_yet() -> None:
    async def blocked() -> tuple[float, float]:
        lag = LoopLag()
        lag.seconds()  # starts the probe
        await asyncio.sleep(0.12)
        calm = lag.seconds()
        time.sleep(0.4)  # the loop busy: the probe cannot run
        return calm, lag.seconds()

    calm, busy = asyncio.run(blocked())
    assert calm < 0.1 and busy >= 0.3


def test_one_pause_of_the_loop_is_not_a_lag_but_a_busy_loop_is() -> None:
    async def paused_once() -> tuple[float, float]:
        lag = LoopLag()
        lag.seconds()  # starts the probe
        await asyncio.sleep(0.12)
        time.sleep(0.4)  # one pause, then the loop is free again
        await asyncio.sleep(0.06)  # the probe wakes late once, and on time after
        after_pause = lag.seconds()
        for _ in range(3):  # the loop busy at every wake-up: requests queue
            time.sleep(0.2)
            await asyncio.sleep(0.005)  # the probe wakes, late
        return after_pause, lag.seconds()

    after_pause, busy = asyncio.run(paused_once())
    assert after_pause < 0.1 and busy >= 0.1


def test_concurrent_ingest_from_many_nodes_loses_nothing(
    services: Any, token: Callable[..., str], engine: Engine, clock: FakeClock
) -> None:
    node_count, pushes, per_push = 8, 10, 9
    tokens = {f"node-{n}": token("agent", f"node-{n}") for n in range(node_count)}
    errors: list[str] = []

    def agent(node_id: str, client: TestClient) -> None:
        headers = {"Authorization": f"Bearer {tokens[node_id]}"}
        for p in range(pushes):
            rows = [gpu_sample(p * per_push + i, clock() + p, device=i % 8) for i in range(per_push)]
            # every push is sent twice: the resend must be counted as duplicates
            for expected in (per_push, 0):
                answer = client.post("/api/v1/ingest", json=batch(*rows, node_id=node_id), headers=headers)
                for _ in range(50):  # 503: the writer ran past its deadline and stored nothing; an agent sends again
                    if answer.status_code != 503:
                        break
                    time.sleep(0.05)
                    answer = client.post("/api/v1/ingest", json=batch(*rows, node_id=node_id), headers=headers)
                if answer.status_code != 200 or answer.json()["accepted"] != expected:
                    errors.append(f"{node_id} push {p}: {answer.status_code} {answer.text}")

    with TestClient(create_app(services)) as client:
        threads = [threading.Thread(target=agent, args=(n, client)) for n in tokens]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
    assert errors == []
    with engine.connect() as conn:
        assert conn.scalar(select(func.count()).select_from(samples)) == node_count * pushes * per_push
        assert conn.scalar(select(func.count()).select_from(nodes)) == node_count


def test_a_token_lookup_that_needs_the_database_runs_off_the_event_loop(
    client: TestClient, auth: Auth, clock: FakeClock, services: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A lookup on the loop stalls every request of the process behind it (5 s pushes miss a 5 s cache)."""
    headers = auth("agent", "node-a")
    services.tokens.forget_cached()
    real_verify = services.tokens.verify
    on_loop: list[bool] = []

    def verify(clear: str, *, now: float) -> Any:
        cached = services.tokens.is_cached(clear, now=now)
        try:
            asyncio.get_running_loop()
            on_loop.append(True)
        except RuntimeError:
            on_loop.append(False)
        assert cached or not on_loop[-1], "a database lookup on the event loop"
        return real_verify(clear, now=now)

    monkeypatch.setattr(services.tokens, "verify", verify)
    for seq in (1, 2):
        answer = client.post("/api/v1/ingest", json=batch(gpu_sample(seq, clock())), headers=headers)
        assert answer.status_code == 200, answer.text
    assert on_loop[0] is False  # the first, a cache miss, in a worker thread


def _compact(*samples_: dict[str, Any], node_id: str = "node-a") -> bytes:
    """The samples in the compact encoding; "NaN" and "Infinity" as the floats a careless agent would send."""
    floats = {"NaN": math.nan, "Infinity": math.inf}

    def careless(value: Any) -> Any:
        if isinstance(value, dict):
            return {k: careless(v) for k, v in value.items()}
        if isinstance(value, list):
            return [careless(v) for v in value]
        return floats.get(value, value) if isinstance(value, str) else value

    return columnar.encode_columns(node_id, [careless(s) for s in samples_])


def _encodable(bad: dict[str, Any]) -> bool:
    try:
        _compact(bad)
    except (columnar.NotEncodable, KeyError):
        return False
    return True


COMPACT_BAD = [case for case in BAD_SAMPLES if isinstance(case[1], dict) and _encodable(case[1])]


def test_the_compact_encoding_holds_every_bad_value_a_number_can_carry() -> None:
    """What it cannot hold (names outside the catalog, strings, a missing seq) goes as JSON from the agent."""
    assert {case for case, _, _ in BAD_SAMPLES} - {case for case, _, _ in COMPACT_BAD} == {
        "unknown metric",
        "seq missing",
        "seq a string",
        "ts a string",
        "metric a string",
    }


@pytest.mark.parametrize(("case", "bad", "field"), COMPACT_BAD, ids=[c[0] for c in COMPACT_BAD])
def test_a_bad_compact_sample_is_refused_naming_index_and_field_and_nothing_is_stored(
    client: TestClient, auth: Auth, engine: Engine, clock: FakeClock, case: str, bad: dict[str, Any], field: str
) -> None:
    headers = {**auth("agent", "node-a"), "Content-Type": columnar.MEDIA_TYPE}
    answer = client.post("/api/v1/ingest", content=_compact(gpu_sample(1, clock()), bad), headers=headers)
    assert answer.status_code == 422, answer.text
    problem = answer.json()["error"]["errors"][0]
    if case in ("bad pool name", "NaN inside extra"):  # pool names and extras travel in the header
        assert problem["field"] == "header" and ("pools[0]" in problem["message"] or "malformed" in problem["message"])
    else:
        assert (problem["sample"], problem["field"]) == (1, field)
    assert stored(engine) == []


def test_every_answer_offers_the_compact_encoding_and_a_compact_batch_is_stored_as_its_json_would_be(
    client: TestClient, auth: Auth, engine: Engine, clock: FakeClock
) -> None:
    first = client.post("/api/v1/ingest", json=batch(gpu_sample(1, clock())), headers=auth("agent", "node-a"))
    assert columnar.MEDIA_TYPE in first.headers["accept-post"]
    samples_ = [gpu_sample(2, clock()), _with(pool_sample(3, clock()), extra={"pod": "ns/p"}), gpu_sample(1, clock())]
    headers = {**auth("agent", "node-a"), "Content-Type": columnar.MEDIA_TYPE, "Content-Encoding": "gzip"}
    answer = client.post("/api/v1/ingest", content=gzip.compress(_compact(*samples_)), headers=headers)
    assert answer.status_code == 200, answer.text
    assert (answer.json()["accepted"], answer.json()["duplicates"]) == (2, 1)
    with engine.connect() as conn:
        rows = {r.seq: r for r in conn.execute(select(samples).where(samples.c.node_id == "node-a"))}
    assert sorted(rows) == [1, 2, 3]
    assert rows[3].pool == pool_sample(3, clock())["pool"] and rows[3].extra == {"pod": "ns/p"}
    for name, value in samples_[0]["metrics"].items():
        assert getattr(rows[2], name) == value


@pytest.mark.parametrize(
    ("body", "field"),
    [
        (b"FPC", "body"),
        (b"FPC1" + (10**6).to_bytes(4, "little"), "header"),
        (b"FPC1" + (2).to_bytes(4, "little") + b"{}", "header"),
        (columnar.encode_columns("node-a", [])[:-1] + b'"', "header"),
    ],
    ids=["too short", "header past the end", "header without node_id", "header not JSON"],
)
def test_a_malformed_compact_body_is_refused_naming_what_is_wrong(
    client: TestClient, auth: Auth, body: bytes, field: str
) -> None:
    headers = {**auth("agent", "node-a"), "Content-Type": columnar.MEDIA_TYPE}
    answer = client.post("/api/v1/ingest", content=body, headers=headers)
    assert answer.status_code == 422, answer.text
    assert answer.json()["error"]["errors"][0]["field"] == field


def test_compact_columns_are_counted_against_the_header_before_they_are_read(
    client: TestClient, auth: Auth, services: Any, clock: FakeClock
) -> None:
    body = _compact(gpu_sample(1, clock()), gpu_sample(2, clock()))
    headers = {**auth("agent", "node-a"), "Content-Type": columnar.MEDIA_TYPE}
    short = client.post("/api/v1/ingest", content=body[:-8], headers=headers)
    assert short.status_code == 422 and short.json()["error"]["field"] == "body"
    assert "need" in short.json()["error"]["message"]
    services.settings.ingest_max_samples = 1
    many = client.post("/api/v1/ingest", content=body, headers=headers)
    assert many.status_code == 422 and "more than the limit of 1" in many.json()["error"]["message"]

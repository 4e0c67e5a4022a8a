"""The outbox on each database: at least once, one delivery id across retries, backoff, order per group, claims."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest
from sqlalchemy import Engine, select

from alerting.alert_store import AlertStore, OutboxRow
from alerting.outbox import DeliverySettings, Outbox, backoff_seconds, delivery_log
from alerting.payload import DELIVERY_HEADER, SIGNATURE_HEADER, verify
from alerting.receiver import LOOPBACK_NETWORKS, WebhookReceiver
from alerting.sender import FakeSender, HttpxSender
from alerting.tables import notifications
from alerting.target_address import AddressPolicy
from alerting.webhooks import TargetKind, WebhookStore

SECRET = "a-secret-of-at-least-16"
T0 = 1_000.0
SETTINGS = DeliverySettings(backoff_initial_seconds=1.0, backoff_max_seconds=8.0, max_age_seconds=100.0)


def enqueue(engine: Engine, hook_id: str, group_key: str, body: str, at: float = T0) -> None:
    AlertStore(engine).commit([], [], [], [OutboxRow(hook_id, group_key, body, at)])


def statuses(engine: Engine) -> list[tuple[str, int]]:
    with engine.connect() as conn:
        rows = conn.execute(select(notifications.c.status, notifications.c.attempts).order_by(notifications.c.id))
        return [(r.status, r.attempts) for r in rows]


@pytest.fixture
def receiver() -> Iterator[WebhookReceiver]:
    with WebhookReceiver(SECRET, fail_first=2) as r:
        yield r


def test_a_receiver_that_fails_twice_gets_three_attempts_with_one_delivery_id(
    engine: Engine, receiver: WebhookReceiver
) -> None:
    hook = WebhookStore(engine).create(receiver.url, SECRET, kind=TargetKind.WEBHOOK, name="oncall", now=T0)
    enqueue(engine, hook.id, "g", '{"version":"4","status":"firing"}')
    outbox = Outbox(
        engine,
        HttpxSender(timeout_seconds=5, policy=AddressPolicy.allowing(LOOPBACK_NETWORKS)),
        SETTINGS,
        jitter=lambda: 0.0,
    )
    try:
        assert outbox.run(T0) == 0  # 500
        assert outbox.run(T0 + 0.4) == 0 and len(receiver.received) == 1  # backing off: 0.5 s after attempt 1
        assert outbox.run(T0 + 0.5) == 0  # 500 again; next 1 s later
        assert outbox.run(T0 + 1.4) == 0 and len(receiver.received) == 2
        assert outbox.run(T0 + 1.5) == 1
        assert outbox.run(T0 + 100) == 0  # delivered once, never again
    finally:
        outbox.close()
    assert [r.answered for r in receiver.received] == [500, 500, 200]
    assert len({r.delivery_id for r in receiver.received}) == 1 and receiver.received[0].delivery_id
    assert all(r.signature_ok for r in receiver.received)
    assert all(r.body == b'{"version":"4","status":"firing"}' for r in receiver.received)
    assert statuses(engine) == [("delivered", 3)]
    log = delivery_log(engine, hook.id)
    assert [(d.attempt, d.outcome, d.status_code) for d in log] == [
        (3, "delivered", 200),
        (2, "failed", 500),
        (1, "failed", 500),
    ]
    assert len({d.delivery_id for d in log}) == 1


@pytest.mark.parametrize(
    ("attempt", "jitter", "expected"), [(1, 0.0, 0.5), (1, 1.0, 1.0), (3, 0.5, 3.0), (10, 0.0, 4.0)]
)
def test_backoff_is_exponential_with_jitter_and_capped(attempt: int, jitter: float, expected: float) -> None:
    assert backoff_seconds(attempt, SETTINGS, jitter) == expected


def test_signature_and_delivery_headers_on_the_wire(engine: Engine) -> None:
    seen: list[httpx.Request] = []

    def answer(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(204)

    hook = WebhookStore(engine).create("https://hooks.example.com/x", SECRET, kind=TargetKind.WEBHOOK, name="", now=T0)
    enqueue(engine, hook.id, "g", '{"a":1}')
    outbox = Outbox(
        engine, HttpxSender(timeout_seconds=5, policy=AddressPolicy(), transport=httpx.MockTransport(answer)), SETTINGS
    )
    try:
        assert outbox.run(T0) == 1
    finally:
        outbox.close()
    request = seen[0]
    assert str(request.url) == "https://hooks.example.com/x" and request.content == b'{"a":1}'
    assert verify(request.content, SECRET, request.headers[SIGNATURE_HEADER])
    assert request.headers[SIGNATURE_HEADER].startswith("sha256=") and request.headers[DELIVERY_HEADER]
    assert request.headers["content-type"] == "application/json"


def test_a_groups_later_notification_waits_for_the_earlier_one(engine: Engine) -> None:
    hook = WebhookStore(engine).create("http://127.0.0.1:9/x", SECRET, kind=TargetKind.WEBHOOK, name="", now=T0)
    enqueue(engine, hook.id, "g1", "firing-g1")
    enqueue(engine, hook.id, "g1", "resolved-g1")
    enqueue(engine, hook.id, "g2", "firing-g2")
    sender = FakeSender(script=[500])
    outbox = Outbox(engine, sender, SETTINGS, jitter=lambda: 0.0)
    try:
        outbox.run(T0)
        assert sorted(r.body for r in sender.sent) == [b"firing-g1", b"firing-g2"]  # g1's resolved waits
        outbox.run(T0 + 0.5)
        outbox.run(T0 + 0.6)
    finally:
        outbox.close()
    assert [r.body for r in sender.sent[2:]] == [b"firing-g1", b"resolved-g1"]  # in order, once each
    assert statuses(engine) == [("delivered", 2), ("delivered", 1), ("delivered", 1)]


def test_a_claimed_row_is_not_sent_twice_and_a_dead_claim_comes_due_again(engine: Engine) -> None:
    hook = WebhookStore(engine).create("http://127.0.0.1:9/x", SECRET, kind=TargetKind.WEBHOOK, name="", now=T0)
    enqueue(engine, hook.id, "g", "body")
    first, second = FakeSender(), FakeSender()
    a, b = Outbox(engine, first, SETTINGS), Outbox(engine, second, SETTINGS)
    try:
        claimed = a._claim(T0)  # a server that claims the row and dies before sending
        assert len(claimed) == 1
        assert b.run(T0 + 1) == 0 and second.sent == []
        assert b.run(T0 + SETTINGS.claim_seconds) == 1 and len(second.sent) == 1
    finally:
        a.close()
        b.close()


def test_past_the_max_age_a_notification_is_abandoned_and_a_deleted_target_drops_its_own(engine: Engine) -> None:
    store = WebhookStore(engine)
    hook = store.create("http://127.0.0.1:9/x", SECRET, kind=TargetKind.WEBHOOK, name="", now=T0)
    other = store.create("http://127.0.0.1:9/y", SECRET, kind=TargetKind.WEBHOOK, name="", now=T0)
    enqueue(engine, hook.id, "g", "old")
    enqueue(engine, other.id, "g", "for-a-deleted-target")
    assert store.delete(other.id)
    outbox = Outbox(engine, FakeSender(script=[None]), SETTINGS)
    try:
        outbox.run(T0 + SETTINGS.max_age_seconds)
    finally:
        outbox.close()
    assert statuses(engine) == [("abandoned", 1), ("dropped", 0)]


def test_an_alertmanager_target_gets_its_api_path_and_no_signature_without_a_secret(engine: Engine) -> None:
    hook = WebhookStore(engine).create("http://127.0.0.1:9093/", None, kind=TargetKind.ALERTMANAGER, name="", now=T0)
    enqueue(engine, hook.id, "g", "[]")
    sender = FakeSender()
    outbox = Outbox(engine, sender, SETTINGS)
    try:
        outbox.run(T0)
    finally:
        outbox.close()
    assert sender.sent[0].url == "http://127.0.0.1:9093/api/v2/alerts"
    assert SIGNATURE_HEADER not in sender.sent[0].headers


def test_history_past_its_days_is_deleted_and_what_is_live_stays(engine: Engine) -> None:
    from alerting.retention import AlertHistoryRetention

    hook = WebhookStore(engine).create("http://127.0.0.1:9/x", SECRET, kind=TargetKind.WEBHOOK, name="", now=T0)
    enqueue(engine, hook.id, "done", "old-delivered")
    enqueue(engine, hook.id, "live", "old-but-pending", at=T0)
    outbox = Outbox(engine, FakeSender(script=[200, 500]), SETTINGS)
    try:
        outbox.run(T0)
    finally:
        outbox.close()
    assert AlertHistoryRetention(engine, keep_seconds=10).run(T0 + 5) == 0
    assert AlertHistoryRetention(engine, keep_seconds=10).run(T0 + 11) == 3  # a notification and two attempts
    assert statuses(engine) == [("pending", 1)]

"""Issue 15, webhooks and silences: each test replays one attack. A webhook URL must not reach the server's own
network under any spelling of an inside address, nor by changing its DNS answer after the check; one URL httpx
refuses must not stop the delivery of the others; viewers must not read what a target answered; a silence regex
must not take exponential time."""

from __future__ import annotations

from collections.abc import Callable
from ipaddress import ip_address

import httpx
import pytest
from fastapi.testclient import TestClient
from sqlalchemy import Engine, insert

from alerting.alert_store import AlertStore, OutboxRow
from alerting.outbox import DeliverySettings, Outbox, delivery_log
from alerting.receiver import LOOPBACK_NETWORKS, WebhookReceiver
from alerting.sender import HttpxSender
from alerting.silences import Matcher, MatchOp
from alerting.tables import deliveries
from alerting.target_address import AddressPolicy, FakeResolver, refusal
from alerting.webhooks import TargetKind, WebhookStore, validate_url
from tests.support.clock import FakeClock
from web.services import AppServices

Auth = Callable[..., dict[str, str]]
SECRET = "a-secret-of-at-least-16"
LOOPBACK = AddressPolicy.allowing(LOOPBACK_NETWORKS)

INSIDE_URLS = [
    ("http://127.0.0.1:18090/", "loopback"),
    ("http://[::1]/", "loopback"),
    ("http://0x7f000001/", "loopback"),  # inet_aton's hexadecimal
    ("http://2130706433/", "loopback"),  # 127.0.0.1 as one decimal number
    ("http://[::ffff:127.0.0.1]/", "loopback"),  # IPv4-mapped IPv6
    ("http://localhost:8080/", "loopback"),
    ("http://169.254.169.254/latest/meta-data/", "cloud-metadata"),
    ("http://[fd00:ec2::254]/", "cloud-metadata"),
    ("http://[::ffff:169.254.169.254]/", "cloud-metadata"),
    ("http://10.1.2.3/", "private"),
    ("http://[::ffff:192.168.0.1]/", "private"),
    ("http://0.0.0.0/", "unspecified"),
    ("http://[fe80::1]/", "link-local"),
    ("http://224.0.0.1/", "multicast"),
    ("http://100.64.0.1/", "not-global"),
    # issue 35: IPv6 forms that carry an IPv4 address are judged by it, and site-local IPv6 is inside
    ("http://[2002:7f00:1::]/", "loopback"),  # 6to4 of 127.0.0.1
    ("http://[2002:a9fe:a9fe::1]/", "cloud-metadata"),  # 6to4 of 169.254.169.254
    ("http://[2002:a00:1::]/", "private"),  # 6to4 of 10.0.0.1
    ("http://[fec0::1]/", "site-local"),
    ("http://[64:ff9b::7f00:1]/", "loopback"),  # NAT64 (RFC 6052) of 127.0.0.1
    ("http://[64:ff9b::a9fe:a9fe]/", "cloud-metadata"),
    ("http://[::ffff:0:a00:1]/", "private"),  # IPv4-translated (RFC 2765) 10.0.0.1
    ("http://[2001:0:4136:e378:8000:63bf:80ff:fffe]/", "loopback"),  # Teredo, its client 127.0.0.1
]


@pytest.mark.parametrize(("url", "reason"), INSIDE_URLS)
def test_every_spelling_of_an_inside_address_is_refused(url: str, reason: str) -> None:
    with pytest.raises(ValueError, match=rf"^url: .* is {reason} "):
        validate_url(url, [], AddressPolicy())


def test_the_api_refuses_them_422_naming_url_and_stores_none(client: TestClient, auth: Auth) -> None:
    for url, reason in INSIDE_URLS:
        answer = client.post("/api/v1/webhooks", json={"url": url, "secret": SECRET}, headers=auth("admin"))
        assert answer.status_code == 422 and "url" in answer.text and reason in answer.text, answer.text
    assert client.get("/api/v1/webhooks", headers=auth("viewer")).json()["items"] == []


def test_an_allowed_network_lets_its_addresses_through_and_no_other() -> None:
    assert validate_url("http://2130706433:9/hook", [], LOOPBACK) == "http://2130706433:9/hook"
    assert validate_url("http://[::ffff:127.0.0.1]:9/", [], LOOPBACK)
    assert validate_url("http://[2002:7f00:1::]:9/", [], LOOPBACK)  # the loopback it carries is allowed
    with pytest.raises(ValueError, match=r"^url: .*cloud-metadata"):
        validate_url("http://169.254.169.254/", [], LOOPBACK)


@pytest.mark.parametrize(
    "address", ["8.8.8.8", "2606:4700:4700::1111", "::ffff:8.8.8.8", "2002:808:808::1", "64:ff9b::808:808"]
)
def test_public_addresses_pass(address: str) -> None:
    assert refusal(ip_address(address)) is None


def test_a_name_that_rebinds_to_loopback_after_the_check_is_refused_at_send() -> None:
    # a public address to the check at creation, 127.0.0.1 to every lookup after
    resolver = FakeResolver({"rebind.test": [["93.184.216.34"], ["127.0.0.1"]]})
    policy = AddressPolicy(resolver=resolver)
    with WebhookReceiver(SECRET) as receiver:
        url = receiver.url.replace("127.0.0.1", "rebind.test")
        assert validate_url(url, [], policy) == url
        sender = HttpxSender(timeout_seconds=5, policy=policy)
        try:
            result = sender.post(url, b"{}", {})
        finally:
            sender.close()
    assert (result.status_code, result.error) == (None, "AddressRefused: loopback")
    assert receiver.received == [] and resolver.asked == ["rebind.test", "rebind.test"]


def test_the_sender_connects_to_the_address_it_checked_not_a_second_lookup() -> None:
    # hooks.test resolves nowhere but in the fake: a delivery that arrives went to the checked 127.0.0.1
    resolver = FakeResolver({"hooks.test": [["127.0.0.1"]]})
    with WebhookReceiver(SECRET) as receiver:
        sender = HttpxSender(timeout_seconds=5, policy=AddressPolicy.allowing(LOOPBACK_NETWORKS, resolver))
        try:
            result = sender.post(receiver.url.replace("127.0.0.1", "hooks.test"), b"{}", {})
        finally:
            sender.close()
    assert result.ok and len(receiver.received) == 1 and resolver.asked == ["hooks.test"]


def test_a_url_httpx_refuses_fails_its_own_delivery_and_the_others_go_on(engine: Engine) -> None:
    bad_url = "http://0177.0.0.1:18090/"  # stored before creation parsed with httpx
    with WebhookReceiver(SECRET) as receiver:
        store = WebhookStore(engine)
        bad = store.create(bad_url, SECRET, kind=TargetKind.WEBHOOK, name="bad", now=0)
        good = store.create(receiver.url, SECRET, kind=TargetKind.WEBHOOK, name="good", now=0)
        AlertStore(engine).commit([], [], [], [OutboxRow(bad.id, "g", "{}", 0), OutboxRow(good.id, "g", "{}", 0)])
        outbox = Outbox(engine, HttpxSender(timeout_seconds=5, policy=LOOPBACK), DeliverySettings())
        try:
            assert outbox.run(0) == 1
        finally:
            outbox.close()
    assert len(receiver.accepted()) == 1
    assert [(d.outcome, d.error) for d in delivery_log(engine, bad.id)] == [("failed", "InvalidURL")]
    with pytest.raises(ValueError, match=r"^url: .*IPv4"):
        validate_url(bad_url, [], LOOPBACK)


def test_a_viewer_never_reads_what_a_target_answered(
    client: TestClient, auth: Auth, services: AppServices, clock: FakeClock
) -> None:
    leak = "<html>internal admin console, token=s3cr3t</html>"
    hook = WebhookStore(services.engine).create(
        "https://hooks.example.com/x", SECRET, kind=TargetKind.WEBHOOK, name="", now=0
    )
    AlertStore(services.engine).commit([], [], [], [OutboxRow(hook.id, "g", "{}", clock())])
    transport = httpx.MockTransport(lambda request: httpx.Response(500, text=leak))
    outbox = Outbox(
        services.engine, HttpxSender(timeout_seconds=5, policy=LOOPBACK, transport=transport), DeliverySettings()
    )
    try:
        outbox.run(clock())
    finally:
        outbox.close()
    with services.engine.begin() as conn:  # a row written before the fix, when the answer was kept
        conn.execute(
            insert(deliveries).values(
                webhook_id=hook.id,
                notification_id=1,
                delivery_id="old",
                attempt=1,
                ts=0.0,
                outcome="failed",
                status_code=502,
                error=leak,
                duration_seconds=0.1,
            )
        )
    answer = client.get(f"/api/v1/webhooks/{hook.id}/deliveries", headers=auth("viewer"))
    assert [(d["status_code"], d["error"]) for d in answer.json()["items"]] == [(502, "HTTP 502"), (500, "HTTP 500")]
    assert "s3cr3t" not in answer.text and "internal" not in answer.text


def test_a_silence_regex_that_backtracks_exponentially_matches_in_linear_time() -> None:
    # Python's re takes ~2**40 steps here; RE2 answers at once that the whole value does not match
    matcher = Matcher("node", "(a+)+$", MatchOp.REGEX)
    assert matcher.matches({"node": "a" * 40 + "!"}) is False
    assert matcher.matches({"node": "a" * 40}) is True


def test_a_regex_re2_cannot_run_in_linear_time_is_refused_422(client: TestClient, auth: Auth) -> None:
    body = {"matchers": [{"name": "node", "value": "(a)\\1", "op": "=~"}], "duration_seconds": 60}
    answer = client.post("/api/v1/silences", json=body, headers=auth("operator"))
    assert answer.status_code == 422 and "matchers" in answer.text, answer.text

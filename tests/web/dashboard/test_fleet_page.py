"""The fleet page on a real app and SQLite, nodes pushed through the real ingest: why a value is missing (the agent's
reason), nodes with firing alerts marked and coloured by the worst, tiles split per pool under each pool's summary,
and the live stream of the page's tiles."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

from fastapi.testclient import TestClient
from sqlalchemy import insert

from alerting.alert_store import AlertStore, SilenceStore
from alerting.lifecycle import Alert, AlertStatus, fingerprint
from alerting.silences import Matcher
from collector.tables import nodes
from fleet.pools import PoolSpec
from tests.conftest import pool_sample
from tests.support.clock import FakeClock
from tests.web.dashboard.conftest import push
from web.services import AppServices
from web.tokens import Role

Browser = Callable[[str], TestClient]


def tile(page: str, node: str) -> str:
    """The first tile of ``node`` on the page, its ``<li>`` through its ``</li>``."""
    found = re.search(rf'<li class="[^"]*" data-node="{node}" data-tile="[^"]*">.*?</li>', page, re.S)
    assert found is not None, f"no tile of {node}"
    return found.group()


def cell(tile_html: str, metric: str) -> tuple[str, str]:
    """(value, why) of one metric's cell."""
    found = re.search(
        rf'<dd data-metric="{metric}">([^<]*)</dd>\s*<small class="why" data-why="{metric}" title="([^"]*)"',
        tile_html,
    )
    assert found is not None, f"no cell {metric}"
    return found[1], found[2]


def push_cpu_node(
    services: AppServices, client: TestClient, node: str, clock: FakeClock, absent: dict[str, Any] | None
) -> None:
    """A CPU node's batch, as an agent without NVML sends it: a chat replica's sample and a report with ``absent``."""
    _info, clear = services.tokens.create(Role.AGENT, now=clock(), node_id=node, name=f"agent-{node}")
    sample = {**pool_sample(1, clock(), pool="chat"), "extra": {}}
    body = {
        "node_id": node,
        "samples": [sample],
        "inventory": {"hostname": f"{node}.local", "gpus": []},
        "report": {"ts": clock(), "pools": {"chat": {"ready": 1}}, **({"absent": absent} if absent else {})},
    }
    answer = client.post("/api/v1/ingest", json=body, headers={"Authorization": f"Bearer {clear}"})
    assert answer.status_code == 200, answer.text


def test_a_missing_value_says_why_in_the_agents_words(
    browser: Browser, services: AppServices, clock: FakeClock
) -> None:
    client = browser("viewer")
    absent = {
        "gpu": "NVML Shared Library Not Found",
        "pools": {"chat": {"kv_cache_utilization_ratio": "tgi exposes no KV-cache metric"}},
    }
    push_cpu_node(services, client, "cpu-1", clock, absent)
    push_cpu_node(services, client, "cpu-old", clock, None)  # an agent older than the reasons
    page = client.get("/").text
    cpu = tile(page, "cpu-1")
    assert '<span data-field="gpus">no GPU</span>' in cpu  # the agent's reason said once above the tiles
    assert "0 GPUs" not in page
    assert cell(cpu, "gpu_power_watts") == ("—", "no GPU")
    assert cell(cpu, "kv_cache_utilization_ratio") == ("—", "tgi exposes no KV-cache metric")
    assert cell(cpu, "request_rate_per_second") == ("10.0 /s", "")  # measured: no reason
    assert cell(cpu, "token_throughput_per_second") == ("—", "not reported yet")
    old = tile(page, "cpu-old")
    assert '<span data-field="gpus">no GPU reported</span>' in old
    assert cell(old, "kv_cache_utilization_ratio") == ("—", "not reported yet")


def test_why_a_fleet_has_no_gpu_is_said_once_with_how_many_nodes_say_it(
    browser: Browser, services: AppServices, clock: FakeClock
) -> None:
    """A CPU-only demo's Fleet page repeated "no GPU (nvmlInit: NVML Shared Library Not Found …)" in every tile's
    header and every GPU cell, 36 times (issue 39): one line above the tiles, each node's page keeps the detail."""
    client = browser("viewer")
    reason = "nvmlInit: NVML Shared Library Not Found (libnvidia-ml.so.1: cannot open shared object file)"
    for node in ("cpu-1", "cpu-2", "cpu-3"):
        push_cpu_node(services, client, node, clock, {"gpu": reason})
    push_cpu_node(services, client, "cpu-4", clock, {"gpu": "NVML: Driver Not Loaded"})
    page = client.get("/").text
    assert page.count(reason) == 1 and page.count("Driver Not Loaded") == 1
    said = re.search(r'<p class="notice" id="gpu-absence">(.*?)</p>', page, re.S)
    assert said is not None
    assert re.search(rf"3 nodes.*?{re.escape(reason)}", said[1], re.S) and "1 node " in said[1], said[1]
    assert f"no GPU ({reason})" in client.get("/nodes/cpu-2").text


def _alert(name: str, severity: str, **labels: str) -> Alert:
    labels = {"alertname": name, "severity": severity, **labels}
    return Alert(1, fingerprint(labels), labels, {"summary": name}, AlertStatus.FIRING, 1.0, 0.0, 0.0)


def test_nodes_with_firing_alerts_are_marked_and_coloured_by_the_worst(
    browser: Browser, services: AppServices, clock: FakeClock
) -> None:
    client = browser("viewer")
    for node, pool in (("node-a", "chat"), ("node-b", "chat"), ("node-c", "vision"), ("node-d", "vision")):
        push(services, client, node, clock, pool=pool)
    AlertStore(services.engine).commit(
        [
            _alert("GpuHot", "critical", node="node-a", gpu="0"),
            _alert("ChatSlow", "warning", pool="chat"),
            _alert("VisionQueue", "critical", pool="vision"),
        ],
        [],
        [],
        [],
    )
    SilenceStore(services.engine).create(
        [Matcher("alertname", "VisionQueue")],
        starts_at=clock(),
        ends_at=clock() + 3600,
        created_by="alice",
        comment="known",
        now=clock(),
    )
    page = client.get("/").text
    a, b = tile(page, "node-a"), tile(page, "node-b")
    red = '<li class="tile critical alerted alert-critical" data-node="node-a" data-tile="node-a/chat">'
    assert a.startswith(red)  # calm metrics, red
    assert "2 firing: GpuHot, ChatSlow</a>" in a
    assert 'href="/alerts?state=firing&amp;node=node-a"' in a
    assert b.startswith('<li class="tile warn alerted alert-warning" data-node="node-b" data-tile="node-b/chat">')
    assert "1 firing: ChatSlow" in b
    assert tile(page, "node-c").startswith('<li class="tile ok" data-node="node-c" data-tile="node-c/vision">')
    assert re.search(r'class="alert-mark" data-field="mark" href="[^"]*" hidden></a>', tile(page, "node-c"))


def test_tiles_are_split_per_pool_under_its_summary(browser: Browser, services: AppServices, clock: FakeClock) -> None:
    services.pools.create("chat", PoolSpec(min_replicas=1, max_replicas=6, slo_p99_seconds=0.5), now=clock())
    client = browser("viewer")
    push(
        services, client, "node-a", clock, report={"chat": {"ready": 2, "starting": 1}}, request_latency_p99_seconds=0.3
    )
    seq = push(services, client, "node-b", clock, pool="vision", request_latency_p99_seconds=0.9)
    push(services, client, "node-b", clock, seq=seq, pool="chat", request_latency_p99_seconds=0.45)
    with services.engine.begin() as conn:  # a node that serves no pool
        conn.execute(insert(nodes).values(id="node-c", first_seen=clock(), last_seen=clock()))
    page = client.get("/").text
    sections = re.findall(r'<section class="pool-group" data-pool="([^"]*)">(.*?)</section>', page, re.S)
    assert [(pool, re.findall(r'data-node="([^"]+)"', body)) for pool, body in sections] == [
        ("chat", ["node-a", "node-b"]),
        ("vision", ["node-b"]),  # a node of two pools shows in both
        ("", ["node-c"]),
    ]
    chat = sections[0][1]
    assert '<b data-pool-field="nodes">2</b> up nodes' in chat
    assert '<b data-pool-field="ready">3</b> ready · <b data-pool-field="starting">1</b> starting' in chat
    assert 'class="p99 warn" data-pool-field="p99_heat"' in chat
    assert 'p99 <small class="agg">max</small> <b data-pool-field="p99">450 ms</b> / SLO 500 ms' in chat
    assert 'demand <small class="agg">sum</small> <b data-pool-field="demand">' in chat
    assert '<b data-pool-field="demand">20.0 /s</b>' in chat
    assert "(no SLO)" in sections[1][1] and "No pool" in sections[2][1]
    only = re.findall(r'<section class="pool-group" data-pool="([^"]*)">', client.get("/?pool=vision").text)
    assert only == ["vision"]


def events_of(client: TestClient, url: str) -> list[dict[str, Any]]:
    with client.stream("GET", url) as stream:
        assert stream.headers["content-type"].startswith("text/event-stream")
        return [json.loads(line[6:]) for line in stream.iter_lines() if line.startswith("data: ")]


def test_the_live_stream_sends_the_pages_tiles_then_only_what_changed(
    browser: Browser, services: AppServices, clock: FakeClock
) -> None:
    client = browser("viewer")
    for node in ("node-a", "node-b", "node-c"):
        push(services, client, node, clock, gpus=1, queue_depth_requests=2.0)
    first, second = events_of(client, "/fleet/live?size=2&events=2")
    assert sorted(first["tiles"]) == ["node-a/chat", "node-b/chat"]  # the page's nodes only, its size kept
    a = first["tiles"]["node-a/chat"]
    assert (a["status"], a["heat"], a["gpus"], a["alert"]) == ("up", "ok", "1 GPU", None)
    assert a["values"]["queue_depth_requests"] == "2.00 req"
    assert a["why"]["kv_cache_utilization_ratio"] == "not reported yet"
    assert first["pools"]["chat"]["nodes"] == "3" and first["counts"] == {"total": 3, "up": 3, "down": 0}
    assert second["tiles"] == {} and second["pools"] == {}  # nothing changed
    [after] = events_of(client, "/fleet/live?after=node-b&events=1")
    assert list(after["tiles"]) == ["node-c/chat"]  # the cursor kept
    assert client.get("/fleet/live?size=0").status_code == 422
    assert client.get("/fleet/live?status=sideways").status_code == 422


def test_the_node_page_says_why_too(browser: Browser, services: AppServices, clock: FakeClock) -> None:
    client = browser("viewer")
    absent = {"gpu": "NVML Shared Library Not Found", "pools": {"chat": {"kv_cache_utilization_ratio": "tgi has none"}}}
    push_cpu_node(services, client, "cpu-1", clock, absent)
    page = client.get("/nodes/cpu-1").text
    assert '<span id="node-gpus">no GPU (NVML Shared Library Not Found)</span>' in page and "0 GPUs" not in page
    kv = re.search(r'data-why-metric="kv_cache_utilization_ratio">([^<]*)</small>', page)
    assert kv is not None and kv[1] == "tgi has none"
    rate = re.search(r'data-why-metric="request_rate_per_second" hidden>', page)
    assert rate is not None  # a measured value's reason is hidden (live.js shows it again if the value goes)


def test_a_node_of_two_pools_shows_each_pools_values_in_its_section(
    browser: Browser, services: AppServices, clock: FakeClock
) -> None:
    client = browser("viewer")
    services.pools.create("chat", PoolSpec(min_replicas=1, max_replicas=4, slo_p99_seconds=10.0), now=clock())
    services.pools.create("vision", PoolSpec(min_replicas=1, max_replicas=4, slo_p99_seconds=1.0), now=clock())
    seq = push(services, client, "node-a", clock, pool="chat", request_latency_p99_seconds=12.0)
    push(services, client, "node-a", clock, seq=seq, pool="vision", request_latency_p99_seconds=0.05)
    rule = {"alertname": "ChatSlow", "severity": "critical", "pool": "chat", "node": "node-a"}
    slow = Alert(1, fingerprint(rule), rule, {}, AlertStatus.FIRING, 12.0, clock(), clock(), clock())
    AlertStore(services.engine).commit([slow], [], [], [])
    page = client.get("/").text

    def section_tile(key: str) -> str:
        found = re.search(rf'<li class="([^"]*)" data-node="node-a" data-tile="{key}">.*?</li>', page, re.S)
        assert found is not None, key
        return found.group()

    chat, vision = section_tile("node-a/chat"), section_tile("node-a/vision")
    assert cell(chat, "request_latency_p99_seconds")[0] == "12.0 s"
    assert cell(vision, "request_latency_p99_seconds")[0] == "50.0 ms"  # vision's own, not the node's worst
    assert "alert-critical" in chat.split(">", 1)[0] and "alerted" not in vision.split(">", 1)[0]
    [event] = events_of(client, "/fleet/live?events=1")
    assert {"node-a/chat", "node-a/vision"} <= set(event["tiles"])

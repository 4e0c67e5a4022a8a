"""Each page with real data behind it: nodes pushed through the real ingest, pools, tenants, events, alerts."""

from __future__ import annotations

import json
import re
from collections.abc import Callable

from fastapi.testclient import TestClient
from sqlalchemy import insert

from alerting.alert_store import AlertStore, SilenceStore
from alerting.lifecycle import Alert, AlertStatus
from alerting.rule_store import RuleStore
from alerting.rules import Op, RuleKind, RuleSpec, Severity
from alerting.tables import alerts
from autoscaler.scaling_events import ScalingEvent
from fleet.pools import Mode, PoolSpec, Provisioning
from fleet.scaling_log import Outcome
from isolation.tenant_keys import TenantKeyStore
from isolation.tenants import QuotaSpec, TenantStore
from predictor.accuracy import WindowAccuracy
from tests.support.clock import FakeClock
from tests.support.forecasts import store_scored_forecast
from tests.support.remote_write import REMOTE_WRITE_HEADERS, named, write_request
from tests.web.dashboard.conftest import csrf_of, push
from tests.web.dashboard.test_audit import everything_logged
from web.dashboard.health_figures import gather
from web.services import AppServices
from wire.control import DesiredState, SloClass, key_digest

Browser = Callable[[str], TestClient]


def _pool(services: AppServices, clock: FakeClock) -> None:
    services.pools.create("chat", PoolSpec(min_replicas=1, max_replicas=6, slo_p99_seconds=0.5), now=clock())


def test_overview_shows_tiles_with_units_and_filters(browser: Browser, services: AppServices, clock: FakeClock) -> None:
    client = browser("viewer")
    push(services, client, "node-a", clock, gpus=2, kv_cache_utilization_ratio=0.99)
    push(services, client, "node-b", clock, pool="vision")
    clock.advance(10)  # both go down
    push(services, client, "node-c", clock, seq=100)
    page = client.get("/")
    assert page.status_code == 200
    assert page.text.count('class="tile ') == 3
    assert "2 GPUs" in page.text and "60 °C" in page.text and "99 %" in page.text
    assert re.search(r'class="tile unknown" data-node="node-a"', page.text)  # down: not judged on old values
    assert "<b>3</b> nodes" in page.text
    assert client.get("/?status=up").text.count('class="tile ') == 1
    assert client.get("/?pool=vision").text.count('class="tile ') == 1
    assert client.get("/?status=sideways").status_code == 422


def test_overview_pages_a_thousand_nodes(browser: Browser, services: AppServices, clock: FakeClock) -> None:
    client = browser("viewer")
    from collector.tables import nodes

    with services.engine.begin() as conn:
        conn.execute(insert(nodes), [{"id": f"n{i:04d}", "first_seen": 0.0, "last_seen": clock()} for i in range(1000)])
    first = client.get("/")
    assert first.text.count('class="tile ') == 48
    after = re.search(r'after=(n\d+)" rel="next"', first.text)
    assert after is not None and after[1] == "n0047"
    last = client.get("/?after=n0959&size=48")
    assert last.text.count('class="tile ') == 40 and 'rel="next"' not in last.text


def test_node_detail_and_its_live_stream(browser: Browser, services: AppServices, clock: FakeClock) -> None:
    client = browser("viewer")
    push(services, client, "node-a", clock, gpus=2, request_latency_p99_seconds=0.123)
    page = client.get("/nodes/node-a")
    assert page.status_code == 200
    assert 'data-series="gpu-1" data-metric="gpu_temperature_celsius">60 °C' in page.text
    assert 'data-series="pool-chat" data-metric="request_latency_p99_seconds">123 ms' in page.text
    assert 'data-live-url="/nodes/node-a/live"' in page.text
    with client.stream("GET", "/nodes/node-a/live?events=2") as stream:
        assert stream.headers["content-type"].startswith("text/event-stream")
        events = [json.loads(line[6:]) for line in stream.iter_lines() if line.startswith("data: ")]
    assert len(events) == 2
    assert events[0]["status"] == "up" and events[0]["values"]["gpu-0"]["gpu_temperature_celsius"] == "60 °C"
    assert client.get("/nodes/ghost").status_code == 404


def test_a_node_seen_through_remote_write_says_so_with_its_interval(
    browser: Browser, services: AppServices, clock: FakeClock, token: Callable[..., str]
) -> None:
    client = browser("viewer")
    push(services, client, "node-a", clock)
    gpu = {"gpu": "0", "Hostname": "gpu-7", "modelName": "NVIDIA H100 80GB HBM3"}
    body = write_request([(named("DCGM_FI_DEV_GPU_TEMP", **gpu), [(clock() - 15, 61.0), (clock(), 62.0)])])
    headers = {"Authorization": f"Bearer {token('remote_write')}", **REMOTE_WRITE_HEADERS}
    assert client.post("/api/v1/write", content=body, headers=headers).status_code == 204
    overview = client.get("/").text
    assert re.search(r'data-node="gpu-7".*?Prometheus remote write every 15\.0 s', overview, re.S)
    assert re.search(r'data-node="node-a".*?agent every 500 ms', overview, re.S)
    node = client.get("/nodes/gpu-7").text
    assert "Prometheus remote write every 15.0 s" in node and "live every 15.0 s" in node
    assert "live every 500 ms" in client.get("/nodes/node-a").text


def test_the_pool_page_shows_its_forecasts_live_accuracy_and_when_it_is_not_followed(
    browser: Browser, services: AppServices, clock: FakeClock
) -> None:
    _pool(services, clock)
    client = browser("viewer")
    assert "Forecast accuracy: not scored yet" in client.get("/pools/chat").text
    day = WindowAccuracy("24h", 1200, 18_000, 1.25, 0.88, 0.5, 1.0)
    store_scored_forecast(services.forecasts, clock(), {"24h": day})
    page = client.get("/pools/chat").text
    assert "last 24h: MASE 1.25" in page and "covering 88 %" in page and "(1200 forecasts)" in page
    assert "not following this pool's forecast: its forecasts scored worse than naive" in page


def test_the_pool_page_says_what_the_controller_sizes_the_pool_by(
    browser: Browser, services: AppServices, clock: FakeClock
) -> None:
    _pool(services, clock)
    client = browser("viewer")
    assert 'id="pool-provisioning"' not in client.get("/pools/chat").text  # not decided yet
    services.pools.set_provisioning("chat", Provisioning(2.35, 95.0, 3, clock() - 60))
    line = re.search(r'id="pool-provisioning">(.*?)</p>', client.get("/pools/chat").text, re.S)
    assert line is not None
    assert "the forecast's 99 % quantile, its excess over the median × 2.35, adapted toward 99 % attainment" in line[1]
    assert "it looks 95.0 s ahead, the startup measured over 3 scale-ups (configured 2 min)" in line[1]
    services.pools.set_provisioning("chat", Provisioning(None, 120.0, 0, clock()))  # a reactive pool
    line = re.search(r'id="pool-provisioning">(.*?)</p>', client.get("/pools/chat").text, re.S)
    assert line is not None and line[1].startswith("The autoscaler looks 2 min ahead, the configured startup")


def test_pool_page_scales_by_hand_and_switches_dry_run(
    browser: Browser, services: AppServices, clock: FakeClock
) -> None:
    _pool(services, clock)
    services.events.add(
        ScalingEvent(
            "chat", clock() - 60, 1, 2, "hybrid", "ForecastSaturation: demand rising", {}, Outcome.APPLIED, "local"
        )
    )
    viewer, operator = browser("viewer"), browser("operator")
    page = viewer.get("/pools/chat")
    assert page.status_code == 200 and "ForecastSaturation: demand rising" in page.text
    assert 'id="scale-form"' not in page.text  # a viewer gets no forms
    csrf = csrf_of(operator.get("/pools/chat").text)
    done = operator.post("/pools/chat/scale", data={"replicas": "4", "reason": "launch", "csrf_token": csrf})
    assert done.status_code == 200 and "Manual scale recorded" in done.text
    pool = services.pools.get("chat")
    assert pool is not None and pool.manual is not None and pool.manual.replicas == 4
    assert "launch" in pool.manual.reason
    too_many = operator.post("/pools/chat/scale", data={"replicas": "40", "csrf_token": csrf})
    assert too_many.status_code == 422 and "outside the pool&#39;s range 1..6" in too_many.text
    not_a_number = operator.post("/pools/chat/scale", data={"replicas": "many", "csrf_token": csrf})
    assert not_a_number.status_code == 422 and "replicas:" in not_a_number.text
    operator.post("/pools/chat/mode", data={"mode": "dry_run", "csrf_token": csrf})
    pool = services.pools.get("chat")
    assert pool is not None and pool.spec.mode is Mode.DRY_RUN
    assert viewer.get("/pools").status_code == 200 and viewer.get("/pools/none").status_code == 404


def test_quota_edits_are_validated_like_the_api(browser: Browser, services: AppServices, clock: FakeClock) -> None:
    client = browser("operator")
    push(services, client, "node-a", clock, extra={"tenants": {"acme": {"requests_per_second": 3.5}}})
    store = TenantStore(services.engine)
    store.create("acme", SloClass.STANDARD, {"chat": QuotaSpec(rate_rps=10)}, now=clock())
    store.create("beta", SloClass.LATENCY_CRITICAL, {"chat": QuotaSpec(active_thread_percentage=70)}, now=clock())
    page = client.get("/tenants")
    assert "3.50 / 10.0" in page.text  # usage against quota
    csrf = csrf_of(page.text)
    impossible = client.post(
        "/tenants/acme/quotas", data={"pool": "chat", "gpu_memory_mib": "200000", "csrf_token": csrf}
    )
    assert impossible.status_code == 422
    assert "gpu_memory_mib: tenants of pool chat would pin 200,064 MiB on a GPU of 81,920 MiB" in impossible.text
    threads = client.post(
        "/tenants/acme/quotas", data={"pool": "chat", "active_thread_percentage": "50", "csrf_token": csrf}
    )
    assert threads.status_code == 422 and "past 100% by 20 percentage points" in threads.text
    negative = client.post("/tenants/acme/quotas", data={"pool": "chat", "rate_rps": "-1", "csrf_token": csrf})
    assert negative.status_code == 422 and "rate_rps:" in negative.text
    acme = store.get("acme")
    assert acme is not None and acme.quotas["chat"] == QuotaSpec(rate_rps=10)  # nothing refused was stored
    ok = client.post("/tenants/acme/quotas", data={"pool": "chat", "rate_rps": "20", "csrf_token": csrf})
    assert ok.status_code == 200 and "Quota saved" in ok.text
    acme = store.get("acme")
    assert acme is not None and acme.quotas["chat"].rate_rps == 20


def test_tenants_page_shows_the_usage_the_nodes_reports_give(
    browser: Browser, services: AppServices, clock: FakeClock
) -> None:
    """Rates add up over the nodes, the p99 is the worst of them; nothing is read from the samples' extras."""
    client = browser("viewer")
    for node, rps, tokens, p99 in (("node-a", 3.5, 400.0, 0.25), ("node-b", 1.0, 20.0, 0.75)):
        usage = {"acme": {"requests_per_second": rps, "tokens_per_second": tokens, "latency_p99_seconds": p99}}
        push(services, client, node, clock, report={"chat": {"ready": 2, "tenants": usage}})
    TenantStore(services.engine).create(
        "acme", SloClass.STANDARD, {"chat": QuotaSpec(rate_rps=10, tokens_per_second=1000)}, now=clock()
    )
    row = re.search(r"<td>chat</td>.*?</tr>", client.get("/tenants").text, re.S)
    assert row is not None
    assert "4.50 / 10.0" in row.group() and "420 / 1,000" in row.group() and "750 ms" in row.group()


def test_tenants_page_lists_traffic_on_every_pool_a_tenant_uses_quota_or_not(
    browser: Browser, services: AppServices, clock: FakeClock
) -> None:
    """acme has a quota on vision only and sends half of chat's requests too: its chat traffic is a row of its own
    (the demo's case), and a caller no tenant record names (``default``) is listed apart, not dropped."""
    client = browser("viewer")
    chat = {
        "acme": {"requests_per_second": 0.5, "tokens_per_second": 16.0, "latency_p99_seconds": 1.5},
        "default": {"requests_per_second": 0.25, "tokens_per_second": 4.0, "latency_p99_seconds": 0.5},
    }
    vision = {"acme": {"requests_per_second": 5.0, "latency_p99_seconds": 0.05}}
    push(
        services,
        client,
        "node-a",
        clock,
        report={"chat": {"ready": 1, "tenants": chat}, "vision": {"ready": 1, "tenants": vision}},
    )
    store = TenantStore(services.engine)
    store.create("acme", SloClass.LATENCY_CRITICAL, {"vision": QuotaSpec(rate_rps=50)}, now=clock())
    store.create("globex", SloClass.BATCH, {}, now=clock())
    text = client.get("/tenants").text
    acme = re.search(r'data-tenant="acme".*?</section>', text, re.S)
    assert acme is not None
    chat_row = re.search(r'<tr data-pool="chat">.*?</tr>', acme.group(), re.S)
    vision_row = re.search(r'<tr data-pool="vision">.*?</tr>', acme.group(), re.S)
    assert chat_row is not None and vision_row is not None
    assert "no quota" in chat_row.group() and "0.500 / no quota" in chat_row.group() and "1.5 s" in chat_row.group()
    assert "5.00 / 50.0" in vision_row.group()
    globex = re.search(r'data-tenant="globex".*?</section>', text, re.S)
    assert globex is not None and "No quotas" in globex.group() and "<tr data-pool" not in globex.group()
    unknown = re.search(r"data-unknown-tenants.*?</section>", text, re.S)
    assert unknown is not None and "<td>default</td><td>chat</td>" in unknown.group()


def test_alerts_page_silences_and_expires(browser: Browser, services: AppServices, clock: FakeClock) -> None:
    alert = Alert(
        1,
        "f1",
        {"alertname": "GpuHot", "severity": "critical", "node": "node-a"},
        {"summary": "hot"},
        AlertStatus.FIRING,
        91.0,
        clock() - 120,
        clock(),
        fired_at=clock() - 60,
    )
    with services.engine.begin() as conn:
        conn.execute(
            insert(alerts).values(
                rule_id=1,
                fingerprint="f1",
                pool="",
                status="firing",
                labels=dict(alert.labels),
                annotations=dict(alert.annotations),
                value=91.0,
                active_since=alert.active_since,
                last_seen_at=clock(),
                fired_at=alert.fired_at,
            )
        )
    client = browser("operator")
    page = client.get("/alerts")
    assert "GpuHot" in page.text and "Silence 1 h" in page.text
    csrf = csrf_of(page.text)
    bad = client.post("/silences", data={"matchers": "no matcher here", "csrf_token": csrf})
    assert bad.status_code == 422 and "is not NAME=VALUE" in bad.text
    done = client.post(
        "/silences", data={"matchers": "alertname=GpuHot, node=node-a", "duration_minutes": "30", "csrf_token": csrf}
    )
    assert done.status_code == 200 and "Silence created" in done.text and ">silenced<" in done.text
    (silence,) = SilenceStore(services.engine).list(active_at=clock())
    assert silence.ends_at == clock() + 1800
    client.post(f"/silences/{silence.id}/expire", data={"csrf_token": csrf})
    assert SilenceStore(services.engine).list(active_at=clock()) == []
    assert client.get("/alerts?state=resolved").status_code == 200


def test_alerts_are_grouped_per_rule_and_pool_the_most_urgent_first_in_their_units(
    browser: Browser, services: AppServices, clock: FakeClock
) -> None:
    rules = RuleStore(services.engine)
    hot = rules.create(
        RuleSpec(name="GpuHot", kind=RuleKind.THRESHOLD, metric="gpu_temperature_celsius", op=Op.GT, threshold=85),
        now=0,
    )
    slow = rules.create(
        RuleSpec(
            name="Slow",
            kind=RuleKind.THRESHOLD,
            severity=Severity.CRITICAL,
            metric="request_latency_p99_seconds",
            op=Op.GT,
            slo_ratio=1.0,
        ),
        now=0,
    )

    def stored(rule_id: int, name: str, severity: str, node: str, status: AlertStatus, value: float) -> Alert:
        labels = {"alertname": name, "severity": severity, "rule_id": str(rule_id), "node": node, "pool": "chat"}
        since = clock() - 60
        return Alert(rule_id, f"{name}{node}", labels, {"summary": name}, status, value, since, clock(), since)

    pending = [stored(hot.id, "GpuHot", "warning", n, AlertStatus.PENDING, 88.0 + i) for i, n in enumerate("abc")]
    firing = stored(slow.id, "Slow", "critical", "a", AlertStatus.FIRING, 12.5)
    AlertStore(services.engine).commit([*pending, firing], [], [], [])
    page = browser("viewer").get("/alerts").text
    rows = re.findall(r'<tr data-alert="(\w+)" data-members="(\d)">', page)
    assert rows == [("Slow", "1"), ("GpuHot", "3")]  # firing critical first; three nodes' pending alerts in one row
    assert "<summary>3 nodes</summary>" in page and "12.5 s" in page and "90 °C" in page
    assert "rule_id=" not in page


def test_the_alerts_of_one_node_are_those_naming_it_or_a_pool_it_serves(
    browser: Browser, services: AppServices, clock: FakeClock
) -> None:
    client = browser("viewer")
    push(services, client, "node-b", clock, pool="chat")
    rule = RuleStore(services.engine).create(
        RuleSpec(name="Hot", kind=RuleKind.THRESHOLD, metric="gpu_temperature_celsius", op=Op.GT, threshold=85), now=0
    )

    def firing(name: str, **where: str) -> Alert:
        labels = {"alertname": name, "severity": "warning", **where}
        return Alert(rule.id, name, labels, {}, AlertStatus.FIRING, 90.0, clock(), clock(), clock())

    alerts = [firing("OnB", node="node-b"), firing("OnA", node="node-a"), firing("ChatSlow", pool="chat")]
    AlertStore(services.engine).commit([*alerts, firing("VisionSlow", pool="vision")], [], [], [])
    page = client.get("/alerts?state=firing&node=node-b").text
    assert sorted(re.findall(r'<tr data-alert="(\w+)"', page)) == ["ChatSlow", "OnB"]  # the fleet page's mark
    assert "Alerts of node node-b" in page and 'href="/alerts?state=pending&amp;node=node-b"' in page
    everyone = client.get("/alerts?state=firing").text  # OnA and OnB: one rule, no pool, one group of 2 nodes
    assert sorted(re.findall(r'<tr data-alert="(\w+)"', everyone)) == ["ChatSlow", "OnA", "VisionSlow"]


def test_a_predictive_alerts_value_is_its_probability_in_percent(
    browser: Browser, services: AppServices, clock: FakeClock
) -> None:
    rule = RuleStore(services.engine).create(
        RuleSpec(name="Saturating", kind=RuleKind.PREDICTIVE, probability=0.5, horizon_seconds=900), now=0
    )
    labels = {"alertname": "Saturating", "severity": "warning", "pool": "chat"}
    alert = Alert(rule.id, "s", labels, {}, AlertStatus.FIRING, 0.798, clock(), clock(), clock())
    AlertStore(services.engine).commit([alert], [], [], [])
    assert ">80 %<" in browser("viewer").get("/alerts").text


def test_health_report_says_not_measured_rather_than_inventing(
    browser: Browser, services: AppServices, clock: FakeClock
) -> None:
    client = browser("viewer")
    push(services, client, "node-a", clock, gpus=2)
    page = client.get("/health")
    assert page.status_code == 200 and "1–8 GPUs" in page.text
    assert "not measured" in page.text and "no rolled-up minute of GPU memory in the window" in page.text
    assert "pass" not in re.sub(r"<[^>]+>", " ", page.text).split("Notes", 1)[1].split()


def test_health_figures_take_the_worst_pools_live_forecast(services: AppServices, clock: FakeClock) -> None:
    """(The check itself shows from the large size class on: a small fleet's page says it comes later.)"""
    assert gather(services).now.notes["forecast_mase"].startswith("no pool forecast scored yet")
    _pool(services, clock)
    day = WindowAccuracy("24h", 1200, 18_000, 0.82, 0.9, None, None)
    store_scored_forecast(services.forecasts, clock(), {"24h": day})
    figures = gather(services).now
    assert figures.forecast_mase == 0.82
    assert (
        figures.notes["forecast_mase"] == "worst of 1 pools over 24 h: chat, 18000 points, 90 % interval covering 90 %"
    )


def test_settings_create_shows_a_token_once_and_revokes(browser: Browser, services: AppServices) -> None:
    admin = browser("admin")
    csrf = csrf_of(admin.get("/settings").text)
    created = admin.post("/settings/tokens", data={"role": "viewer", "name": "ci-bot", "csrf_token": csrf})
    assert created.status_code == 201 and created.headers["cache-control"] == "no-store"
    secret = re.search(r'<code class="secret">([^<]+)</code>', created.text)
    assert secret is not None and services.tokens.verify(secret[1], now=0.0) is not None
    assert secret[1] not in admin.get("/settings").text  # shown once
    (bot,) = [t for t in services.tokens.list() if t.name == "ci-bot"]
    admin.post(f"/settings/tokens/{bot.id}/revoke", data={"csrf_token": csrf})
    assert services.tokens.get(bot.id) is None
    agent = admin.post("/settings/tokens", data={"role": "agent", "csrf_token": csrf})
    assert agent.status_code == 422 and "node_id" in agent.text
    hook = admin.post("/settings/webhooks", data={"url": "ftp://x", "csrf_token": csrf})
    assert hook.status_code == 422
    viewer = browser("viewer").get("/settings")
    assert viewer.status_code == 200 and "Tokens are managed by admins" in viewer.text


def _tenant_of(services: AppServices, key: str) -> str | None:
    """The tenant an agent's serving port would take ``key`` for, from the digests the desired state carries."""
    return DesiredState(tenant_keys=dict(TenantKeyStore(services.engine).digests())).tenant_keys.get(key_digest(key))


def test_tenant_keys_are_created_shown_once_and_revoked_by_admins(
    browser: Browser, services: AppServices, clock: FakeClock
) -> None:
    TenantStore(services.engine).create("acme", SloClass.STANDARD, {}, now=clock())
    admin = browser("admin")
    csrf = csrf_of(admin.get("/tenants").text)
    created = admin.post("/tenants/acme/keys", data={"name": "checkout", "csrf_token": csrf})
    assert created.status_code == 201 and created.headers["cache-control"] == "no-store"
    secret = re.search(r'<code class="secret">([^<]+)</code>', created.text)
    assert secret is not None and _tenant_of(services, secret[1]) == "acme"
    assert "Authorization: Bearer &lt;key&gt;" in created.text and "serving port" in created.text
    assert secret[1] not in everything_logged(services.engine)
    (key,) = TenantKeyStore(services.engine).list("acme")
    reloaded = admin.get("/tenants").text
    assert secret[1] not in reloaded and 'class="secret"' not in reloaded  # shown once
    assert "<td>checkout</td>" in reloaded and f"<code>{key.prefix}…</code>" in reloaded
    unnamed = admin.post("/tenants/acme/keys", data={"csrf_token": csrf})
    assert unnamed.status_code == 201 and "New key key-" in unnamed.text  # the label is optional
    revoked = admin.post(f"/tenants/acme/keys/{key.id}/revoke", data={"csrf_token": csrf})
    assert revoked.status_code == 200 and "Key revoked" in revoked.text and "<td>checkout</td>" not in revoked.text
    assert TenantKeyStore(services.engine).get("acme", key.id) is None and _tenant_of(services, secret[1]) is None


def test_only_admins_see_and_manage_tenant_keys(browser: Browser, services: AppServices, clock: FakeClock) -> None:
    TenantStore(services.engine).create("acme", SloClass.STANDARD, {}, now=clock())
    key, _clear = TenantKeyStore(services.engine).create("acme", now=clock(), name="checkout")
    for role in ("viewer", "operator"):
        client = browser(role)
        page = client.get("/tenants")
        assert page.status_code == 200 and "managed by admins" in page.text
        assert key.prefix not in page.text and "/tenants/acme/keys" not in page.text
        csrf = csrf_of(page.text)
        create = client.post("/tenants/acme/keys", data={"name": "mine", "csrf_token": csrf})
        revoke = client.post(f"/tenants/acme/keys/{key.id}/revoke", data={"csrf_token": csrf})
        assert create.status_code == revoke.status_code == 403 and "needs the admin role" in create.text
    assert [k.id for k in TenantKeyStore(services.engine).list("acme")] == [key.id]


def test_an_empty_list_says_so_without_an_empty_table_under_it(browser: Browser) -> None:
    """ "No alerts." was followed by the table's header row and nothing under it (issue 39): each page that says a
    list is empty shows no table for it."""
    client = browser("admin")
    for path in ("/alerts", "/pools", "/settings"):
        page = client.get(path)
        assert page.status_code == 200, path
        said = re.findall(r"<p class=\"empty\"[^>]*>.*?</p>\s*(</?[a-z]+)", page.text, re.S)
        assert said, f"{path}: no empty list on a fresh server"
        assert "<table" not in said, f"{path}: an empty-list message followed by a table: {said}"


def test_a_pool_seen_through_remote_write_is_linked_and_named_with_its_model_and_source(
    browser: Browser, services: AppServices, clock: FakeClock, token: Callable[..., str]
) -> None:
    """A vLLM without a pool label serves a pool named after its model (issue 39): the Fleet page's section of an
    unconfigured pool sends to the pools list, which says who reports it and its model, not to a 404."""
    client = browser("viewer")
    model = "meta-llama/Llama-3.1-8B-Instruct"
    waiting = named("vllm:num_requests_waiting", model_name=model, engine="0", node="gpu-7")
    body = write_request([(waiting, [(clock() - 15, 2.0), (clock(), 3.0)])])
    headers = {"Authorization": f"Bearer {token('remote_write')}", **REMOTE_WRITE_HEADERS}
    assert client.post("/api/v1/write", content=body, headers=headers).status_code == 204
    pool = "meta-llama--Llama-3.1-8B-Instruct"

    overview = client.get("/").text
    head = re.search(r'<h2 class="pool-head">(.*?)</h2>', overview, re.S)
    assert head is not None and pool in head[1] and model in head[1]
    links = re.findall(r'href="([^"]+)"', head[1])
    assert f"/pools/{pool}" not in links and links, links  # not configured: no page of its own yet
    for link in links:
        assert client.get(link).status_code == 200, link

    # an alert's generatorURL names the pool's page: before anyone configures it, its nodes on the Fleet page
    sent = client.get(f"/pools/{pool}", follow_redirects=False)
    assert (sent.status_code, sent.headers["location"]) == (303, f"/?pool={pool}")
    assert client.get("/pools/nobody-reports-this").status_code == 404

    pools = client.get("/pools").text
    assert "Reported by agents" not in pools
    assert re.search(rf"{pool}.*?Prometheus remote write.*?{re.escape(model)}", pools, re.S), pools

    services.pools.create(pool, PoolSpec(max_replicas=2), now=clock())
    head = re.search(r'<h2 class="pool-head">(.*?)</h2>', client.get("/").text, re.S)
    assert head is not None and f'href="/pools/{pool}"' in head[1]
    assert client.get(f"/pools/{pool}").status_code == 200


def test_each_tile_cell_says_how_its_series_combine(browser: Browser, services: AppServices, clock: FakeClock) -> None:
    """A tile mixed the busiest GPU's utilization with the sum of every GPU's power, saying neither (issue 39)."""
    client = browser("viewer")
    push(services, client, "node-a", clock, gpus=2)
    tile = client.get("/").text
    cells = dict(re.findall(r'<div class="cell" title="([a-z_0-9]+)[^"]*">\s*<dt>(.*?)</dt>', tile, re.S))
    assert len(cells) == 12, cells
    assert re.search(r"GPU util.*\bmax\b", cells["gpu_utilization_ratio"]), cells
    assert re.search(r"Power.*\bsum\b", cells["gpu_power_watts"]), cells
    assert re.search(r"p99 latency.*\bmax\b", cells["request_latency_p99_seconds"]), cells
    assert re.search(r"Requests.*\bsum\b", cells["request_rate_per_second"]), cells
    assert "sum" not in cells["network_latency_seconds"] and "max" not in cells["network_latency_seconds"]


def test_the_health_page_lists_what_senders_send_that_no_source_reads(
    browser: Browser, services: AppServices, clock: FakeClock, token: Callable[..., str]
) -> None:
    client = browser("viewer")
    assert "Every family remote write and OTLP senders sent is mapped" in client.get("/health").text
    go = named("go_goroutines", instance="10.0.0.1:9400", job="dcgm")
    body = write_request([(go, [(clock() - 15, 12.0), (clock(), 13.0)])])
    headers = {"Authorization": f"Bearer {token('remote_write')}", **REMOTE_WRITE_HEADERS}
    assert client.post("/api/v1/write", content=body, headers=headers).status_code == 204
    services.remote.unmapped.flush(clock())
    section = re.search(r'<section id="unmapped">(.*?)</section>', client.get("/health").text, re.S)
    assert section is not None
    assert re.search(r"go_goroutines.*?Prometheus remote write.*?\b2\b", section[1], re.S), section[1]
    assert "/api/v1/unmapped-families" in section[1]

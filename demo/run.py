"""``fleetpilot demo``: the whole system on this machine — a server on SQLite, three agents running the built-in CPU
workload, two pools and two tenants, and a day of real demand compressed into five minutes played into them
(``demo.load``) — until Ctrl-C.

Before the agents start, the trace's hours before that day are seeded as chat's history (``demo.history``)
so the first forecast has hours to fit. A few server settings are shorter than their production defaults
(``DEMO_SETTINGS``: rollups every 10 s, forecasts every 20 s, a 60-s scale-down window); everything else is the
production code path: the autoscaler scales chat up at the day's peak and down in its night, the isolation enforcer
throttles globex in its burst and restores it, and the default alert rules judge the latency the burst causes.
What depends on the machine's speed is measured, not assumed (``demo.burst``): chat's SLO is calibrated from what its
replicas reported in the warm-up, and globex's burst grows until acme's chat answers pass it. The printout's timeline
says what to expect; "Recorded" lines print the server's record of the throttle and the alerts as it is made."""

from __future__ import annotations

import contextlib
import itertools
import threading
import time
from pathlib import Path

import httpx

from autoscaler.policy.settings import PolicySettings
from collector.database import make_engine
from demo.burst import DEMO_CALIBRATION, NOISY_EPISODE
from demo.episode import EpisodeContext, RecordingSender, TenantLatencies, calibrate_slo, run_episodes
from demo.history import SeededHistory, seed_history
from demo.load import CompressedDay, compressed_day, day_plan, request_sizes
from demo.recorded import ServerRecord
from demo.timeline import timeline_lines
from fleet.pools import SPEC_FIELDS, Policy, PoolSpec, PoolStore
from fleetpilot.jobs import enforcer_settings
from fleetpilot.launch import AgentProcess, ServerProcess
from fleetpilot.settings import ServerSettings
from inference_agent.ports import free_port
from inference_agent.stop_signals import stop_on_signals
from isolation.tenant_keys import TenantKeyStore
from isolation.tenants import QuotaSpec, TenantStore
from migrations import runner
from replay.driver import Endpoint, HttpSender, run_replay
from web.tokens import Role, TokenStore
from wire.control import SloClass

DEMO_NODES = ("demo-node-1", "demo-node-2", "demo-node-3")
# Each demo node runs a replica of the image-classification pool it was started with (torch, CPU); the chat pool
# names no node and is placed by the control plane, one replica a node at its minimum, as the built-in text engine:
# its replicas report each tenant's tokens and latency, which is what the isolation enforcer judges.
DEMO_POOLS = "vision=classify:1"
# The same pools as the control plane knows them: chat's SLO is generous until the warm-up calibrates it to what this
# machine's replicas deliver (``demo.burst.SloCalibration``), and a replica's capacity is what these small CPU
# replicas sustain on a busy 2-core machine (a chat replica about one trace request every two seconds), so the
# autoscaler has a target from the first tick rather than after learning one.
# chat scales reactively: its forecast (shown, scored, alerted on) is fitted on minutes of real time while the day
# plays 288 times faster, and the demand stopping while the demo starts widened its band enough for the predictive
# bound to ask for the fourth replica before any load came.
DEMO_POOL_SPECS = {
    "chat": PoolSpec(
        min_replicas=3,
        max_replicas=4,
        policy=Policy.REACTIVE,
        slo_p99_seconds=10.0,
        startup_seconds=30.0,
        replica_capacity=0.5,
        engine="text",
    ),
    "vision": PoolSpec(
        min_replicas=2,
        max_replicas=4,
        slo_p99_seconds=1.0,
        startup_seconds=30.0,
        replica_capacity=10.0,
        engine="classify",  # a pool names its engine; without one it would run the built-in text engine
    ),
}
# Two tenants: acme's classifications are latency-critical; globex's generations are batch work with a compute share
# (of chat's replicas, and of the KV cache when acme needs it) and a rate limit.
DEMO_TENANTS = {
    "acme": (SloClass.LATENCY_CRITICAL, {"vision": QuotaSpec(rate_rps=50.0)}),
    "globex": (SloClass.BATCH, {"chat": QuotaSpec(active_thread_percentage=50, rate_rps=8.0)}),
}
CLASSIFY_INTERVAL_S = 0.2
DEMO_KEY_NAME = "demo"  # each run revokes the keys the last one made and creates its own
# Server settings the demo shortens, so five minutes show what production takes longer to: setting → (what the
# banner calls it, the demo's value in seconds). The scale-down window stays above chat's startup_seconds, which
# would otherwise stretch it (autoscaler.policy.rails.scale_down_window_seconds).
DEMO_SETTINGS = {
    "rollup_interval_seconds": ("rollups every", 10.0),
    "forecast_interval_seconds": ("forecasts every", 20.0),
    "scale_down_window_seconds": ("scale-down window", 60.0),
}
PLAN_LAPS = 8  # days planned at once (40 minutes; even, for the burst of every other day), played until Ctrl-C
RETIRED_PROFILE = "builtin-text"  # the engine profile chat ran as in earlier demos


def run_demo(settings: ServerSettings, *, state_dir: Path = Path(".fleetpilot")) -> int:
    settings = settings.model_copy(update={name: value for name, (_label, value) in DEMO_SETTINGS.items()})
    runner.upgrade(settings.database_url)
    admin_token, agent_tokens = _demo_tokens(settings.database_url)
    _demo_pools_and_tenants(settings.database_url)
    tenant_keys = _demo_tenant_keys(settings.database_url)
    day = compressed_day()
    seeded = _seed_history(settings.database_url, day)
    logs = state_dir / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    server = ServerProcess(
        settings.database_url,
        port=settings.port,
        admin_token=admin_token,
        log_path=logs / "server.log",
        env={f"FLEETPILOT_{name.upper()}": f"{value:g}" for name, (_label, value) in DEMO_SETTINGS.items()},
    )
    agents = [
        AgentProcess(
            collector=server.url,
            token=agent_tokens[node],
            node_id=node,
            spool_dir=state_dir / "agents" / node,
            log_path=logs / f"{node}.log",
            workload="builtin",
            pools=DEMO_POOLS,
            serve_port=free_port(),
        )
        for node in DEMO_NODES
    ]
    stop = threading.Event()
    stop_on_signals(stop)
    api = httpx.Client(base_url=f"{server.url}/api/v1", headers={"Authorization": f"Bearer {admin_token}"})
    try:
        server.start()
        for agent in agents:
            agent.start()
        _announce(server, admin_token, agents, logs)
        policy = PolicySettings(stabilization_window_seconds=settings.scale_down_window_seconds)
        enforcer = enforcer_settings(settings)
        lines = timeline_lines(day, NOISY_EPISODE, DEMO_CALIBRATION, DEMO_POOL_SPECS, seeded, enforcer, policy)
        print("\n".join(lines), flush=True)
        threading.Thread(target=_replay_day, args=(stop, agents, tenant_keys, day, api), daemon=True).start()
        threading.Thread(target=_classify_load, args=(stop, agents, tenant_keys), daemon=True).start()
        _watch(stop, server, agents)
    finally:
        print("stopping the agents (they flush their spools) and the server ...", flush=True)
        for agent in agents:
            agent.stop()
        server.stop()
        api.close()
    return 0


def _demo_tokens(database_url: str) -> tuple[str, dict[str, str]]:
    """A fresh admin token for this run and one agent token per demo node."""
    engine = make_engine(database_url)
    try:
        store = TokenStore(engine)
        now = time.time()
        _info, admin = store.create(Role.ADMIN, now=now, name="demo")
        agents = {node: store.create(Role.AGENT, now=now, name=f"demo {node}", node_id=node)[1] for node in DEMO_NODES}
    finally:
        engine.dispose()
    return admin, agents


def _demo_pools_and_tenants(database_url: str) -> None:
    """Configure the demo's pools and tenants once (a later run keeps whatever was edited through the API, except a
    pool still naming the engine profile earlier demos declared: no node declares it now, so it gets today's spec)."""
    engine = make_engine(database_url)
    try:
        pools, tenants, now = PoolStore(engine), TenantStore(engine), time.time()
        for name, spec in DEMO_POOL_SPECS.items():
            pool = pools.get(name)
            if pool is None:
                pools.create(name, spec, now=now)
            elif pool.spec.engine == RETIRED_PROFILE:
                pools.update(name, {field: getattr(spec, field) for field in SPEC_FIELDS}, now=now)
        for tenant, (slo_class, quotas) in DEMO_TENANTS.items():
            if tenants.get(tenant) is None:
                tenants.create(tenant, slo_class, quotas, now=now)
    finally:
        engine.dispose()


def _demo_tenant_keys(database_url: str) -> dict[str, str]:
    """A fresh key for each demo tenant (the previous run's revoked): tenant → its key."""
    engine = make_engine(database_url)
    try:
        store, keys = TenantKeyStore(engine), {}
        for tenant in DEMO_TENANTS:
            for old in store.list(tenant):
                if old.name == DEMO_KEY_NAME:
                    store.delete(tenant, old.id)
            _key, keys[tenant] = store.create(tenant, now=time.time(), name=DEMO_KEY_NAME)
    finally:
        engine.dispose()
    return keys


def _seed_history(database_url: str, day: CompressedDay) -> SeededHistory:
    """chat's demand over the hours before the day, as rollups ending now (``demo.history``)."""
    engine = make_engine(database_url)
    try:
        return seed_history(engine, "chat", day.history_per_minute(), DEMO_NODES, now=time.time())
    finally:
        engine.dispose()


def _announce(server: ServerProcess, admin_token: str, agents: list[AgentProcess], logs: Path) -> None:
    print(f"Dashboard: {server.url}/", flush=True)
    print(f"Admin token: {admin_token}", flush=True)
    print(f"API docs: {server.url}/docs    Prometheus metrics: {server.url}/metrics", flush=True)
    print("Sign in to the dashboard with the admin token, then look at:", flush=True)
    for line in (
        f"  Fleet    {server.url}/            the three nodes, their 12 metrics live (a node's page: every 500 ms)",
        f"  Pools    {server.url}/pools/chat?range=6h  demand over the seeded hours, the forecast and its",
        "                                    90 % band (from the first minute), the autoscaler's decisions and why;",
        "                                    the 15 min view is live; scale by hand or switch to dry-run",
        f"  Tenants  {server.url}/tenants     acme (latency-critical: vision, and half of chat) and globex (batch,",
        "                                    chat, 50 % share), each by its own API key (POST",
        "                                    /api/v1/tenants/NAME/keys makes one); globex's throttles and restores",
        f"  Alerts   {server.url}/alerts      the default rules at work (the timeline below says which fires",
        "                                    when, and why); silence one there",
    ):
        print(line, flush=True)
    print(f"Shortened for the demo: {demo_settings_text()}", flush=True)
    print(f"Try: curl -H 'Authorization: Bearer {admin_token}' {server.url}/api/v1/pools/chat/forecast", flush=True)
    print(f"Agents {', '.join(DEMO_NODES)} push every second; logs in {logs}/. Ctrl-C stops everything.", flush=True)
    print(
        f"Inference on each agent ({', '.join(str(a.serve_url) for a in agents)}); the small model has random "
        "weights, so its text is noise while the load it puts on the node is real.",
        flush=True,
    )


def demo_settings_text() -> str:
    """What ``DEMO_SETTINGS`` shortens, beside the defaults: "rollups every 10 s (production default 60 s), ..."."""
    defaults = ServerSettings.model_fields
    return ", ".join(
        f"{label} {value:g} s (production default {defaults[name].default:g} s)"
        for name, (label, value) in DEMO_SETTINGS.items()
    )


def _replay_day(
    stop: threading.Event, agents: list[AgentProcess], keys: dict[str, str], day: CompressedDay, api: httpx.Client
) -> None:
    """Once a text replica is warm, play the compressed day into chat until Ctrl-C, with the noisy-neighbour
    episode beside it (``demo.episode``) and the server's record of it printed as it is made."""
    urls = [str(a.serve_url) for a in agents]
    deadline = time.monotonic() + 180
    while not stop.is_set() and time.monotonic() < deadline and not any(_ready(url, "chat") for url in urls):
        stop.wait(1.0)
    sizes = request_sizes()
    plan = day_plan(day, urls, laps=PLAN_LAPS, sizes=sizes)
    started_mono, started_unix = time.monotonic(), time.time()
    print(
        f"Load: {time.strftime('%H:%M:%S')} the day starts: {len(plan) // PLAN_LAPS} chat requests a day "
        f"({day.lap_s:.0f} s, time scale {day.time_scale:g}x), tenants acme and globex by their keys.",
        flush=True,
    )
    record = ServerRecord(api, started_unix, out=_say)
    ctx = EpisodeContext("chat", urls, sizes, record, api, started_mono, started_unix, day.lap_s)
    victim = TenantLatencies("acme")
    sender = HttpSender("chat", Endpoint.COMPLETIONS, tenant_keys=keys)
    threading.Thread(target=record.watch, args=(stop,), daemon=True).start()
    threading.Thread(target=_episodes, args=(ctx, sender, victim, stop), daemon=True).start()
    try:
        while not stop.is_set():
            run_replay(plan, RecordingSender(sender, victim), stop=stop)
    finally:
        sender.close()


def _episodes(ctx: EpisodeContext, sender: HttpSender, victim: TenantLatencies, stop: threading.Event) -> None:
    """Calibrate chat's SLO in the warm-up, then burst on every other day (``demo.burst``)."""
    slo_s = calibrate_slo(ctx, DEMO_CALIBRATION, stop, _say) or DEMO_POOL_SPECS["chat"].slo_p99_seconds
    run_episodes(ctx, NOISY_EPISODE, sender, victim, slo_s, stop, _say)


def _say(line: str) -> None:
    print(line, flush=True)


def _classify_load(stop: threading.Event, agents: list[AgentProcess], keys: dict[str, str]) -> None:
    """acme's classifications: one image every 200 ms, round-robin over the agents, until Ctrl-C."""
    image = [[[0.5] * 64 for _ in range(64)] for _ in range(3)]
    urls = itertools.cycle(str(a.serve_url) for a in agents)
    headers = {"Authorization": f"Bearer {keys['acme']}"}
    with httpx.Client(timeout=10.0) as client:
        while not stop.wait(CLASSIFY_INTERVAL_S):
            # a replica still warming or moving is the load's business, as with the day's replay
            with contextlib.suppress(httpx.HTTPError):
                client.post(f"{next(urls)}/v1/classify", json={"model": "vision", "inputs": [image]}, headers=headers)


def _ready(url: str, pool: str) -> bool:
    try:
        pools = httpx.get(f"{url}/healthz", timeout=2.0).json()["pools"]
    except (httpx.HTTPError, ValueError, KeyError):
        return False
    return bool(pools.get(pool, {}).get("ready"))


def _watch(stop: threading.Event, server: ServerProcess, agents: list[AgentProcess]) -> None:
    """Wait for Ctrl-C; a child that dies on its own ends the demo with its log tail."""
    while not stop.wait(1.0):
        for child in (server, *agents):
            if child.process is not None and child.process.poll() is not None:
                print(f"{child.name} exited with {child.process.returncode}:\n{child.log_tail()}", flush=True)
                return

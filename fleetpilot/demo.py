"""``fleetpilot demo``: the whole system on this machine — a server on SQLite, three agents running the built-in CPU
workload, two pools and two tenants, and the Azure LLM conv trace replayed into them — until Ctrl-C.

The server's periodic jobs run faster than in production (rollups every 10 s, forecasts every 20 s) so that the
dashboard shows a forecast, scaling decisions and an alert within the first two minutes; everything else is the
production code path."""

from __future__ import annotations

import contextlib
import itertools
import threading
import time
from pathlib import Path

import httpx

from collector.database import make_engine
from fleet.pools import PoolSpec, PoolStore
from fleetpilot.launch import AgentProcess, ServerProcess, free_port
from fleetpilot.settings import ServerSettings
from fleetpilot.trace_load import AZURE_CONV_SLICE, load_trace, replay_over_http
from inference_agent.stop_signals import stop_on_signals
from isolation.tenant_keys import TenantKeyStore
from isolation.tenants import QuotaSpec, SloClass, TenantStore
from migrations import runner
from web.tokens import Role, TokenStore

DEMO_NODES = ("demo-node-1", "demo-node-2", "demo-node-3")
# Each demo node runs a replica of the image-classification pool it was started with (torch, CPU), and declares an
# engine profile: the built-in text engine run as an external process, as a node would declare vLLM. The chat pool
# names that profile and is placed by the control plane, one replica a node at its minimum.
DEMO_POOLS = "vision=classify:1"
DEMO_PROFILE = """
[profiles.builtin-text]
command = ["{python}", "-m", "inference_agent.serving.replica", "--pool", "{pool}", "--kind", "text",
           "--port", "{port}", "--served-model-name", "{model}"]
health_path = "/health"
metrics_kind = "vllm"
models = ["tiny-chat"]
startup_timeout_seconds = 300
"""
# The same pools as the control plane knows them: CPU generation is slow, so the chat SLO is generous, and a
# replica's capacity is what these small CPU replicas sustain (a chat replica about one trace request a second),
# so the autoscaler has a target from the first tick rather than after learning one.
DEMO_POOL_SPECS = {
    "chat": PoolSpec(
        min_replicas=3,
        max_replicas=4,
        slo_p99_seconds=10.0,
        startup_seconds=30.0,
        replica_capacity=1.0,
        engine="builtin-text",
        model="tiny-chat",
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
DEMO_JOB_INTERVALS = {"FLEETPILOT_ROLLUP_INTERVAL_SECONDS": "10", "FLEETPILOT_FORECAST_INTERVAL_SECONDS": "20"}


def run_demo(settings: ServerSettings, *, state_dir: Path = Path(".fleetpilot")) -> int:
    runner.upgrade(settings.database_url)
    admin_token, agent_tokens = _demo_tokens(settings.database_url)
    _demo_pools_and_tenants(settings.database_url)
    tenant_keys = _demo_tenant_keys(settings.database_url)
    logs = state_dir / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    config = state_dir / "agent.toml"
    config.write_text(DEMO_PROFILE)
    server = ServerProcess(
        settings.database_url,
        port=settings.port,
        admin_token=admin_token,
        log_path=logs / "server.log",
        env=DEMO_JOB_INTERVALS,
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
            config=config,
        )
        for node in DEMO_NODES
    ]
    stop = threading.Event()
    stop_on_signals(stop)
    try:
        server.start()
        for agent in agents:
            agent.start()
        _announce(server, admin_token, agents, logs)
        for target in (_replay_trace, _classify_load):
            args = (stop, agents, tenant_keys)
            threading.Thread(target=target, args=args, name=target.__name__, daemon=True).start()
        _watch(stop, server, agents)
    finally:
        print("stopping the agents (they flush their spools) and the server ...", flush=True)
        for agent in agents:
            agent.stop()
        server.stop()
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
    """Configure the demo's pools and tenants once (a later run keeps whatever was edited through the API)."""
    engine = make_engine(database_url)
    try:
        pools, tenants, now = PoolStore(engine), TenantStore(engine), time.time()
        for name, spec in DEMO_POOL_SPECS.items():
            if pools.get(name) is None:
                pools.create(name, spec, now=now)
        for tenant, (slo_class, quotas) in DEMO_TENANTS.items():
            if tenants.get(tenant) is None:
                tenants.create(tenant, slo_class, quotas, now=now)
    finally:
        engine.dispose()


def _demo_tenant_keys(database_url: str) -> dict[str, dict[str, str]]:
    """A fresh key for each demo tenant (the previous run's revoked): tenant → the headers its requests carry."""
    engine = make_engine(database_url)
    try:
        store, headers = TenantKeyStore(engine), {}
        for tenant in DEMO_TENANTS:
            for old in store.list(tenant):
                if old.name == DEMO_KEY_NAME:
                    store.delete(tenant, old.id)
            _key, clear = store.create(tenant, now=time.time(), name=DEMO_KEY_NAME)
            headers[tenant] = {"Authorization": f"Bearer {clear}"}
    finally:
        engine.dispose()
    return headers


def _announce(server: ServerProcess, admin_token: str, agents: list[AgentProcess], logs: Path) -> None:
    print(f"Dashboard: {server.url}/", flush=True)
    print(f"Admin token: {admin_token}", flush=True)
    print(f"API docs: {server.url}/docs    Prometheus metrics: {server.url}/metrics", flush=True)
    print("Sign in to the dashboard with the admin token, then look at:", flush=True)
    for line in (
        f"  Fleet    {server.url}/            the three nodes, their 12 metrics live (a node's page: every 500 ms)",
        f"  Pools    {server.url}/pools/chat  demand, the forecast and its 90 % band (after 3 rolled-up minutes), the",
        "                                    autoscaler's decisions and why; scale by hand or switch to dry-run",
        f"  Tenants  {server.url}/tenants     acme (latency-critical, vision) and globex (batch, chat, 50 % share),",
        "                                    each sending its own API key (POST /api/v1/tenants/NAME/keys makes one)",
        f"  Alerts   {server.url}/alerts      the default rules at work within minutes (here, typically",
        "                                    SaturationPredicted for chat as the replayed load nears its capacity);",
        "                                    silence one there",
    ):
        print(line, flush=True)
    print(f"Try: curl -H 'Authorization: Bearer {admin_token}' {server.url}/api/v1/pools/chat/forecast", flush=True)
    print(f"Agents {', '.join(DEMO_NODES)} push every second; logs in {logs}/. Ctrl-C stops everything.", flush=True)
    print(
        f"Inference on each agent ({', '.join(str(a.serve_url) for a in agents)}); the small model has random "
        "weights, so its text is noise while the load it puts on the node is real.",
        flush=True,
    )


def _replay_trace(stop: threading.Event, agents: list[AgentProcess], keys: dict[str, dict[str, str]]) -> None:
    """Once every agent's text replica is warm, replay the Azure conv trace slice into them until Ctrl-C."""
    urls = [str(a.serve_url) for a in agents]
    deadline = time.monotonic() + 180
    while not stop.is_set() and time.monotonic() < deadline and not any(_ready(url, "chat") for url in urls):
        stop.wait(1.0)
    trace = load_trace(AZURE_CONV_SLICE, limit=600, compression=1.0)
    print(
        f"Load: replaying {len(trace)} requests of the Azure LLM conv trace (CC-BY-4.0, Splitwise, ISCA 2024) "
        f"every {trace[-1].arrival_s:.0f} s into the chat pools, tenants acme and globex (by their keys).",
        flush=True,
    )
    replay_over_http(trace, urls, "chat", stop, tenants=(keys["acme"], keys["globex"]))


def _classify_load(stop: threading.Event, agents: list[AgentProcess], keys: dict[str, dict[str, str]]) -> None:
    """acme's classifications: one image every 200 ms, round-robin over the agents, until Ctrl-C."""
    image = [[[0.5] * 64 for _ in range(64)] for _ in range(3)]
    urls = itertools.cycle(str(a.serve_url) for a in agents)
    with httpx.Client(timeout=10.0) as client:
        while not stop.wait(CLASSIFY_INTERVAL_S):
            # a replica still warming or moving is the load's business, as with the trace replay
            with contextlib.suppress(httpx.HTTPError):
                client.post(
                    f"{next(urls)}/v1/classify", json={"model": "vision", "inputs": [image]}, headers=keys["acme"]
                )


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

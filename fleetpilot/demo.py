"""``fleetpilot demo``: the whole system on this machine — a server on SQLite and two agents — until Ctrl-C."""

from __future__ import annotations

import signal
import threading
import time
from pathlib import Path
from types import FrameType

import httpx

from autoscaler.pools import PoolSpec, PoolStore
from collector.database import make_engine
from fleetpilot.launch import AgentProcess, ServerProcess, free_port
from fleetpilot.settings import ServerSettings
from fleetpilot.trace_load import AZURE_CONV_SLICE, load_trace, replay_over_http
from migrations import runner
from web.tokens import Role, TokenStore

DEMO_NODES = ("demo-node-1", "demo-node-2")
# Each demo node runs one replica of a text-generation pool and one of an image-classification pool (torch, CPU).
DEMO_POOLS = "chat=text:1,vision=classify:1"
# The same pools as the control plane knows them: CPU generation is slow, so the chat SLO is generous.
DEMO_POOL_SPECS = {
    "chat": PoolSpec(min_replicas=2, max_replicas=4, slo_p99_seconds=10.0, startup_seconds=30.0),
    "vision": PoolSpec(min_replicas=2, max_replicas=4, slo_p99_seconds=1.0, startup_seconds=30.0),
}


def run_demo(settings: ServerSettings, *, state_dir: Path = Path(".fleetpilot")) -> int:
    runner.upgrade(settings.database_url)
    admin_token, agent_tokens = _demo_tokens(settings.database_url)
    _demo_pools(settings.database_url)
    logs = state_dir / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    server = ServerProcess(
        settings.database_url, port=settings.port, admin_token=admin_token, log_path=logs / "server.log"
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

    def on_signal(_signum: int, _frame: FrameType | None) -> None:
        stop.set()

    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, on_signal)
    try:
        server.start()
        for agent in agents:
            agent.start()
        _announce(server, admin_token, agents, logs)
        load = threading.Thread(target=_replay_trace, args=(stop, agents), name="trace-replay", daemon=True)
        load.start()
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


def _demo_pools(database_url: str) -> None:
    """Configure the demo's pools once (a later run keeps whatever was edited through the API)."""
    engine = make_engine(database_url)
    try:
        store = PoolStore(engine)
        for name, spec in DEMO_POOL_SPECS.items():
            if store.get(name) is None:
                store.create(name, spec, now=time.time())
    finally:
        engine.dispose()


def _announce(server: ServerProcess, admin_token: str, agents: list[AgentProcess], logs: Path) -> None:
    print(f"Dashboard: {server.url}/", flush=True)
    print(f"Admin token: {admin_token}", flush=True)
    print(f"API docs: {server.url}/docs    Prometheus metrics: {server.url}/metrics", flush=True)
    print(f"Try: curl -H 'Authorization: Bearer {admin_token}' {server.url}/api/v1/nodes", flush=True)
    print(
        f"     curl -H 'Authorization: Bearer {admin_token}' {server.url}/api/v1/pools/chat/forecast"
        "   (after a few minutes: the forecast needs rolled-up minutes)",
        flush=True,
    )
    print(f"Agents {', '.join(DEMO_NODES)} push every second; logs in {logs}/. Ctrl-C stops everything.", flush=True)
    serving = agents[0].serve_url
    print(
        f"Inference on each agent ({', '.join(str(a.serve_url) for a in agents)}); the small model has random "
        "weights, so its text is noise while the load it puts on the node is real. E.g.:",
        flush=True,
    )
    print(
        f'  curl -H \'X-Tenant: acme\' {serving}/v1/completions -d \'{{"model": "chat", "prompt": '
        f'"Hello", "max_tokens": 16}}\'',
        flush=True,
    )


def _replay_trace(stop: threading.Event, agents: list[AgentProcess]) -> None:
    """Once every agent's text replica is warm, replay the Azure conv trace slice into them until Ctrl-C."""
    urls = [str(a.serve_url) for a in agents]
    deadline = time.monotonic() + 180
    while not stop.is_set() and time.monotonic() < deadline and not all(_chat_ready(url) for url in urls):
        stop.wait(1.0)
    trace = load_trace(AZURE_CONV_SLICE, limit=600, compression=1.0)
    print(
        f"Load: replaying {len(trace)} requests of the Azure LLM conv trace (CC-BY-4.0, Splitwise, ISCA 2024) "
        f"every {trace[-1].arrival_s:.0f} s into the chat pools, tenants acme and globex.",
        flush=True,
    )
    replay_over_http(trace, urls, "chat", stop, tenants=("acme", "globex"))


def _chat_ready(url: str) -> bool:
    try:
        pools = httpx.get(f"{url}/healthz", timeout=2.0).json()["pools"]
    except (httpx.HTTPError, ValueError, KeyError):
        return False
    return bool(pools.get("chat", {}).get("ready"))


def _watch(stop: threading.Event, server: ServerProcess, agents: list[AgentProcess]) -> None:
    """Wait for Ctrl-C; a child that dies on its own ends the demo with its log tail."""
    while not stop.wait(1.0):
        for child in (server, *agents):
            if child.process is not None and child.process.poll() is not None:
                print(f"{child.name} exited with {child.process.returncode}:\n{child.log_tail()}", flush=True)
                return

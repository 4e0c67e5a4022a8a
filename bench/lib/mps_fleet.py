"""``bench.mps``'s fleet part: MPS limits through fleetpilot, on the built-in replicas of two pools sharing a GPU.

A real server (SQLite) where tenant ``a`` holds 25 % of pool ``small`` and tenant ``b`` 75 % of pool ``large`` (the
tenants API), and a real agent running both pools itself (``--pools``, replicas on ``cuda`` sharing the node's GPUs,
the NVML probe) with the private MPS daemon's pipe directory in its environment, so that it starts each replica as
an MPS client with its pool's share (the supervisor's log says what holds). Then:

1. **Thread shares.** Closed-loop streamed generations saturate both pools at once: the tokens/s ratio large/small
   against 3, within 20 %. The built-in model is small (4.3 M parameters), so its speed may be bound by the CPU's
   kernel launches rather than by SMs, and then the ratio stays near 1 however MPS divides the SMs: the raw part
   (matmul clients) tells the two apart.
2. **A limit change.** Under a steady 4 requests/s on ``small``, tenant ``a``'s share goes 25 → 50: MPS fixes a
   client's limits when it starts, so the supervisor replaces the replica (a new one with 50 %, then the old one
   drains). Measured: seconds until the new replica's limits hold, the fewest ready replicas meanwhile, the requests
   that failed.
3. **A pinned-memory limit.** A 128-MiB memory quota: what the agent reported of the replica started under it.

The server, the tenants, the saturating clients and the log reading are shared with the profile part
(``bench.lib.mps_profile``).
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import httpx

from bench.lib.mps_daemon import PrivateMpsDaemon
from bench.lib.noisy_flood import Flood, noisy_flood
from bench.lib.progress import progress_line
from bench.lib.replicas import wait_for_replicas
from fleetpilot.launch import AgentProcess, ServerProcess
from inference_agent.ports import free_port
from inference_agent.serving.supervision.quota import MPS_MEMORY_ENV, MPS_THREADS_ENV

NODE_ID = "bench-mps"
SHARES = {"small": ("a", 25), "large": ("b", 75)}  # pool → (tenant, active thread percentage)
TARGET_RATIO = 3.0
RATIO_TOLERANCE = 0.2  # of the target: 2.4 to 3.6 holds
CHANGED_PERCENT = 50
FLEET_PINNED_MIB = 128
SATURATING = Flood(clients=16, max_tokens=256)  # closed-loop streams per pool
GPU_LIMITS = re.compile(r"replica (\S+) of pool (\S+) GPU limits: (.*)")


progress = progress_line("mps")


def ratio_held(ratio: float) -> bool:
    return abs(ratio - TARGET_RATIO) <= RATIO_TOLERANCE * TARGET_RATIO


@dataclass
class Fleet:
    server: ServerProcess
    agent: AgentProcess
    api: httpx.Client
    keys: dict[str, dict[str, str]] = field(default_factory=dict)  # tenant → its request headers

    def gpu_limit_lines(self, pool: str) -> list[tuple[str, str]]:
        """(replica, what holds) for every "GPU limits" line the agent logged for ``pool``, in order."""
        text = self.agent.log_path.read_text(errors="replace")
        return [(m[1], m[3]) for m in GPU_LIMITS.finditer(text) if m[2] == pool]

    def pools(self) -> dict[str, Any]:
        serve_url = self.agent.serve_url
        assert serve_url is not None
        pools: dict[str, Any] = httpx.get(f"{serve_url}/healthz", timeout=2.0).json()["pools"]
        return pools


def call(
    api: httpx.Client, method: str, path: str, body: dict[str, Any] | None = None, params: dict[str, str] | None = None
) -> Any:
    answer = api.request(method, path, json=body, params=params)
    answer.raise_for_status()
    return answer.json() if answer.content else None


def wait_until(condition: Callable[[], object], timeout_s: float, poll_s: float = 0.2) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(poll_s)
    return False


@contextmanager
def tenant_server(
    folder: Path, *, quotas: bool = True
) -> Iterator[tuple[ServerProcess, httpx.Client, dict[str, dict[str, str]]]]:
    """A server with the tenants of SHARES, each holding its pool's thread share unless ``quotas`` is False; its admin
    client and each tenant's request headers."""
    # a pool placed within a second of its POST, and its MPS share planned within a second of the node's GPUs
    server_env = {"FLEETPILOT_AUTOSCALE_INTERVAL_SECONDS": "0.5", "FLEETPILOT_ENFORCE_INTERVAL_SECONDS": "1"}
    folder.mkdir(parents=True, exist_ok=True)
    with ServerProcess(f"sqlite:///{folder}/fleet.db", env=server_env, log_path=folder / "server.log") as server:
        api = httpx.Client(
            base_url=f"{server.url}/api/v1", headers={"Authorization": f"Bearer {server.admin_token}"}, timeout=10.0
        )
        keys = {}
        for pool, (tenant, percent) in SHARES.items():
            call(api, "POST", "/tenants", {"name": tenant, "slo_class": "standard"})
            if quotas:
                call(api, "PUT", f"/tenants/{tenant}/quotas/{pool}", {"active_thread_percentage": percent})
            key = call(api, "POST", f"/tenants/{tenant}/keys", {"name": "bench"})["key"]
            keys[tenant] = {"Authorization": f"Bearer {key}"}
        try:
            yield server, api, keys
        finally:
            api.close()


def agent_env(daemon: PrivateMpsDaemon) -> dict[str, str]:
    """The agent's replicas on CUDA as clients of ``daemon``, drained in 2 s when replaced."""
    return {**daemon.env, "FLEETPILOT_REPLICA_DEVICE": "cuda", "FLEETPILOT_REPLICA_DRAIN_SECONDS": "2"}


@contextmanager
def fleet(daemon: PrivateMpsDaemon, folder: Path) -> Iterator[Fleet]:
    """The tenants' server and an agent running both pools itself, a ready replica of each."""
    with tenant_server(folder) as (server, api, keys):
        agent = AgentProcess(
            collector=server.url, token=server.create_agent_token(NODE_ID), node_id=NODE_ID,
            spool_dir=folder / "spool", gpu_probe="nvml", workload="builtin",
            pools=",".join(f"{pool}=text:1" for pool in SHARES), serve_port=free_port(),
            log_path=folder / "agent.log", env=agent_env(daemon),
        )  # fmt: skip
        with agent:
            wait_for_replicas(agent)
            yield Fleet(server, agent, api, keys)


def limits_logged(f: Fleet, pools: list[str]) -> dict[str, str]:
    """The GPU limits the agent last logged for each pool's replica (waiting up to 60 s for a first line)."""
    started = {pool: wait_until(partial(f.gpu_limit_lines, pool), 60.0) for pool in pools}
    limits = {pool: (f.gpu_limit_lines(pool) or [("", "none logged")])[-1][1] for pool in pools}
    progress(f"replicas' GPU limits as the agent logged them: {limits}")
    return limits if all(started.values()) else {**limits, "missing": "no GPU limits line in 60 s"}


def saturate(f: Fleet, pools: list[str], window_s: float) -> tuple[dict[str, float], float, float]:
    """Closed-loop streams on each pool (its tenant's key) at once: each pool's tokens/s over the window after a 3 s
    ramp, and the window's start and end (Unix seconds)."""
    serve_url = f.agent.serve_url
    assert serve_url is not None
    with ExitStack() as stack:
        counters = [
            stack.enter_context(noisy_flood(serve_url, SATURATING, f.keys[SHARES[pool][0]], pool=pool))
            for pool in pools
        ]
        time.sleep(3.0)
        before, begun, start = [c.read() for c in counters], time.perf_counter(), time.time()
        time.sleep(window_s)
        after, elapsed, end = [c.read() for c in counters], time.perf_counter() - begun, time.time()
    rates = {pool: (after[k]["tokens"] - before[k]["tokens"]) / elapsed for k, pool in enumerate(pools)}
    return rates, start, end


def fleet_thread_shares(f: Fleet, window_s: float) -> dict[str, Any]:
    """Both pools saturated at once; each one's streamed tokens/s."""
    limits = limits_logged(f, list(SHARES))
    rates, _, _ = saturate(f, list(SHARES), window_s)
    progress(f"tokens/s under saturation: {rates}")
    figures: dict[str, Any] = {
        "tokens_per_second": {pool: round(rate, 1) for pool, rate in rates.items()},
        "limits_logged": limits,
    }
    if rates["small"] > 0:
        figures["ratio"] = round(rates["large"] / rates["small"], 3)
        figures["held"] = ratio_held(figures["ratio"])
    return figures


class SteadyLoad:
    """Short completions on ``pool`` at ``rate_rps`` (open loop), while watching the pool's ready replicas."""

    def __init__(self, f: Fleet, pool: str, key: dict[str, str], rate_rps: float = 4.0) -> None:
        self.f, self.pool, self.rate_rps = f, pool, rate_rps
        self.client = httpx.Client(timeout=30.0, headers=key)
        self.ok = 0
        self.failed: dict[str, int] = {}
        self.ready: list[int] = []
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._send), threading.Thread(target=self._watch)]
        self._lock = threading.Lock()

    def _one(self) -> None:
        body = {"model": self.pool, "prompt": "Hello", "max_tokens": 8}
        try:
            status = self.client.post(f"{self.f.agent.serve_url}/v1/completions", json=body).status_code
            outcome = "ok" if status == 200 else str(status)
        except httpx.HTTPError as exc:
            outcome = type(exc).__name__
        with self._lock:
            if outcome == "ok":
                self.ok += 1
            else:
                self.failed[outcome] = self.failed.get(outcome, 0) + 1

    def _send(self) -> None:
        workers: list[threading.Thread] = []
        while not self._stop.wait(1 / self.rate_rps):
            worker = threading.Thread(target=self._one)
            worker.start()
            workers.append(worker)
        for worker in workers:
            worker.join()

    def _watch(self) -> None:
        while not self._stop.wait(0.1):
            try:
                self.ready.append(self.f.pools()[self.pool]["ready"])
            except (httpx.HTTPError, KeyError, ValueError):
                self.ready.append(-1)  # the agent did not answer: counted apart, not as 0 ready

    def __enter__(self) -> SteadyLoad:
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join()
        self.client.close()


def one_replica(pool: dict[str, Any]) -> bool:
    return bool(pool["ready"] == 1 and pool["starting"] == 0)


def fleet_limit_change(f: Fleet, timeout_s: float) -> dict[str, Any]:
    tenant, _ = SHARES["small"]
    seen = len(f.gpu_limit_lines("small"))
    wanted = f"{MPS_THREADS_ENV}: {CHANGED_PERCENT}"
    with SteadyLoad(f, "small", f.keys[tenant]) as load:
        time.sleep(2.0)
        begun = time.monotonic()
        call(f.api, "PUT", f"/tenants/{tenant}/quotas/small", {"active_thread_percentage": CHANGED_PERCENT})
        held = wait_until(lambda: any(wanted in line for _, line in f.gpu_limit_lines("small")[seen:]), timeout_s)
        seconds = time.monotonic() - begun
        settled = wait_until(lambda: one_replica(f.pools()["small"]), 30.0)
        time.sleep(2.0)
    watched = [n for n in load.ready if n >= 0]
    figures = {
        "from_percent": SHARES["small"][1],
        "to_percent": CHANGED_PERCENT,
        "new_limits_held": held,
        "seconds": round(seconds, 1) if held else None,
        "settled_to_one_replica": settled,
        "min_ready_replicas": min(watched) if watched else None,
        "agent_unanswered_polls": len(load.ready) - len(watched),
        "requests_ok": load.ok,
        "requests_failed": load.failed,
        "new_lines": [line for _, line in f.gpu_limit_lines("small")[seen:]],
    }
    progress(f"limit change 25 → {CHANGED_PERCENT}: {figures}")
    return figures


def fleet_pinned_memory(f: Fleet, timeout_s: float) -> dict[str, Any]:
    """A memory quota too small for the replica: what the agent said of the replica started under it."""
    tenant, _ = SHARES["small"]
    log_before = len(f.agent.log_path.read_text(errors="replace"))
    quota = {"active_thread_percentage": CHANGED_PERCENT, "gpu_memory_mib": FLEET_PINNED_MIB}
    call(f.api, "PUT", f"/tenants/{tenant}/quotas/small", quota)
    wanted = f"{MPS_MEMORY_ENV}: 0={FLEET_PINNED_MIB}M"

    def new_text() -> str:
        return f.agent.log_path.read_text(errors="replace")[log_before:]

    def outcome() -> bool:
        text = new_text()
        return wanted in text or ("of pool small exited" in text)

    reported = wait_until(outcome, timeout_s)
    time.sleep(3.0)  # a replica holding its limit may still fail loading the model under it
    lines = [line.strip()[:300] for line in new_text().splitlines() if "pool small" in line][:8]
    figures = {
        "limit_mib": FLEET_PINNED_MIB,
        "agent_reported": reported,
        "replica_crashed": any("exited with" in line for line in lines),
        "ready_replicas": f.pools().get("small", {}).get("ready"),
        "lines": lines,
    }
    progress(f"pinned {FLEET_PINNED_MIB} MiB through the agent: {figures}")
    return figures


def fleet_part(daemon: PrivateMpsDaemon, folder: Path, quick: bool) -> dict[str, Any]:
    """The three measurements on one fleet; it held when the change did (the shares' ratio is reported: see 1.)."""
    with fleet(daemon, folder) as f:
        shares = fleet_thread_shares(f, 8.0 if quick else 20.0)
        change = fleet_limit_change(f, 45.0)
        pinned = fleet_pinned_memory(f, 25.0)
    held = bool(change["new_limits_held"] and change["min_ready_replicas"] and not change["requests_failed"])
    return {"fleet_thread_shares": shares, "limit_change": change, "fleet_pinned_memory": pinned, "held": held}

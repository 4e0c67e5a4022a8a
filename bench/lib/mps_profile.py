"""``bench.mps``'s profile part: the built-in engine declared as an engine profile, run by the agent as an external
process on CUDA under an MPS thread share, its metrics read through the engine adapter.

The agent's config file (``--config``) declares the built-in replica on CUDA, answering vLLM's ``/health`` and
``/metrics`` names (``metrics_kind = "vllm"``), as two profiles that differ only in their declared environment:
``builtin-cuda-25`` starts its replicas with ``CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=25``, ``builtin-cuda-75`` with 75.
The server places one pool at a time (``POST /pools``, one replica; no agent is started with it): ``small`` of the
first, then ``large`` of the second. The agent starts the replica as a client of the private MPS daemon and reads
its ``/metrics`` through the ``vllm`` adapter; closed-loop streamed generations saturate the pool for the window,
then the pool is deleted. For each share: the percentage the replica's process started with, the tokens/s the
clients counted, and the tokens/s the agent read through the adapter and pushed (``token_throughput_per_second``,
read back through ``GET /api/v1/series``). The part holds when the ratio large/small is within 20 % of 3 and both
pools were read through the adapter.

Why the profile's environment and not the tenants API (which the fleet part uses, on ``--pools`` replicas): on a
one-GPU node a placed pool's replica cannot get a tenant's share. The server plans a node's MPS shares only once the
node runs a replica (``isolation.desired.read_inputs`` reads the GPUs of nodes running a pool), so the first replica
starts with none, and its replacement with the share waits for a free GPU, which the replica it replaces holds
(a placed replica takes whole GPUs). One pool after the other, for the same reason; MPS caps a client's SMs whether
or not another client runs, so this measures the share itself. The built-in model is small (4.3 M parameters):
bound by kernel launches rather than SMs, its ratio stays near 1 however MPS divides the SMs, and the raw part
(matmul clients) tells the two apart.
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import httpx
import psutil

from bench.lib.mps_daemon import PrivateMpsDaemon
from bench.lib.mps_fleet import (
    NODE_ID,
    SHARES,
    Fleet,
    agent_env,
    call,
    progress,
    ratio_held,
    saturate,
    tenant_server,
    wait_until,
)
from fleetpilot.launch import AgentProcess
from inference_agent.ports import free_port
from inference_agent.serving.supervision.quota import MPS_THREADS_ENV

PROFILE = "builtin-cuda"
MODEL = "builtin-text"
READY_TIMEOUT_S = 45.0  # python, torch and a CUDA context under MPS; the built-in model loads in a second
GONE_TIMEOUT_S = 15.0  # a deleted pool's replica drains (2 s) and frees its GPU


def profile_name(percent: int) -> str:
    return f"{PROFILE}-{percent}"


@dataclass(frozen=True)
class ProfileSetup:
    """What the profiles' replicas run (``torch``; ``fake`` in the tests, without a GPU) and the agent's GPU probe."""

    replica_engine: str = "torch"
    gpu_probe: str = "nvml"

    def replica_command(self) -> list[str]:
        """The built-in replica on CUDA, generating exactly max_tokens (fixed lengths compare like for like)."""
        return [
            "{python}", "-m", "inference_agent.serving.replica", "--pool", "{pool}", "--kind", "text",
            "--port", "{port}", "--device", "cuda", "--engine", self.replica_engine, "--ignore-eos",
            "--served-model-name", "{model}", "--drain-timeout-s", "5",
        ]  # fmt: skip

    def config_toml(self) -> str:
        """The agent's config file: one profile per share (a JSON array of strings is a TOML array)."""
        return "\n".join(
            f"[profiles.{profile_name(percent)}]\ncommand = {json.dumps(self.replica_command())}\n"
            f'env = {{ {MPS_THREADS_ENV} = "{percent}" }}\n'
            f'health_path = "/health"\nmetrics_path = "/metrics"\nmetrics_kind = "vllm"\nmodels = ["{MODEL}"]\n'
            f"startup_timeout_seconds = {READY_TIMEOUT_S:g}\ndrain_grace_seconds = 2\n"
            for _, percent in SHARES.values()
        )


GPU_SETUP = ProfileSetup()


@contextmanager
def profile_fleet(daemon: PrivateMpsDaemon, folder: Path, setup: ProfileSetup) -> Iterator[Fleet]:
    """The tenants' server (no thread quotas: the profiles carry the shares) and an agent offering the profiles,
    running no pool until one is placed."""
    with tenant_server(folder, quotas=False) as (server, api, keys):
        config = folder / "agent.toml"
        config.write_text(setup.config_toml())
        agent = AgentProcess(
            collector=server.url, token=server.create_agent_token(NODE_ID), node_id=NODE_ID,
            spool_dir=folder / "spool", gpu_probe=setup.gpu_probe, config=config, serve_port=free_port(),
            log_path=folder / "agent.log", env=agent_env(daemon),
        )  # fmt: skip
        with agent:
            yield Fleet(server, agent, api, keys)


def pool_state(f: Fleet, pool: str) -> dict[str, Any] | None:
    """The pool as the agent's ``/healthz`` reports it (its engine, ready and starting replicas); None while it runs
    none of it or does not answer."""
    try:
        pools = httpx.get(f"{f.agent.metrics_url}/healthz", timeout=2.0).json()["pools"]
        found: dict[str, Any] | None = pools.get(pool)
    except (httpx.HTTPError, ValueError, KeyError):
        return None
    return found


def warm(f: Fleet, pool: str) -> bool:
    state = pool_state(f, pool)
    return state is not None and state["ready"] >= 1 and state["starting"] == 0


def gone(f: Fleet, pool: str) -> bool:
    state = pool_state(f, pool)
    return state is None or state["ready"] + state["starting"] == 0


def replica_share(f: Fleet, pool: str) -> str | None:
    """The thread percentage the pool's replica process started with (what MPS reads when it opens its context)."""
    assert f.agent.process is not None
    for child in psutil.Process(f.agent.process.pid).children():
        try:
            if f"--pool {pool} " in " ".join(child.cmdline()):
                return child.environ().get(MPS_THREADS_ENV)
        except psutil.Error:  # gone, or a zombie until the agent reaps it
            continue
    return None


def adapter_tokens_per_second(f: Fleet, pool: str, start: float, end: float) -> float | None:
    """The median ``token_throughput_per_second`` the agent read through the adapter and pushed for ``pool`` between
    ``start`` and ``end`` (Unix seconds); None when it pushed none."""
    params = {"metric": "token_throughput_per_second", "node": NODE_ID, "pool": pool, "start": str(start)}
    points = call(f.api, "GET", "/series", params=params | {"end": str(end)})["points"]
    values = [float(value) for _, value in points if value is not None]
    return statistics.median(values) if values else None


def one_share(f: Fleet, pool: str, window_s: float) -> dict[str, Any]:
    """Place ``pool`` (one replica of its share's profile), saturate it for the window, read it back, delete it."""
    percent = SHARES[pool][1]
    body = {"name": pool, "engine": profile_name(percent), "model": MODEL, "policy": "static", "startup_seconds": 5}
    call(f.api, "POST", "/pools", body | {"min_replicas": 1, "max_replicas": 1})
    if not wait_until(partial(warm, f, pool), READY_TIMEOUT_S):
        raise TimeoutError(f"no warm replica of {pool} within {READY_TIMEOUT_S:g} s:\n{f.agent.log_tail()}")
    engine, share = (pool_state(f, pool) or {}).get("engine"), replica_share(f, pool)
    rates, start, end = saturate(f, [pool], window_s)
    # the agent's next push: a second away, longer when a loaded server answers 503 and the spool holds it
    wait_until(lambda: adapter_tokens_per_second(f, pool, start, end) is not None, 20.0)
    adapter = adapter_tokens_per_second(f, pool, start, end)
    progress(f"{pool} at {share} %: clients {rates[pool]:.1f} tokens/s, through the adapter {adapter}")
    call(f.api, "DELETE", f"/pools/{pool}")
    freed = wait_until(partial(gone, f, pool), GONE_TIMEOUT_S)
    return {
        "percent": percent,
        "engine": engine,
        "replica_started_with": {MPS_THREADS_ENV: share},
        "tokens_per_second": round(rates[pool], 1),
        "adapter_tokens_per_second": None if adapter is None else round(adapter, 1),
        "replica_gone_after_delete": freed,
    }


def profile_part(
    daemon: PrivateMpsDaemon, folder: Path, quick: bool, setup: ProfileSetup = GPU_SETUP
) -> dict[str, Any]:
    """Each share in turn on a profile replica; the ratio large/small, by the clients and through the adapter."""
    with profile_fleet(daemon, folder, setup) as f:
        shares = {pool: one_share(f, pool, 8.0 if quick else 20.0) for pool in SHARES}
    small, large = shares["small"], shares["large"]
    figures: dict[str, Any] = {"profiles": [profile_name(p) for _, p in SHARES.values()], "shares": shares}
    figures["read_through_adapter"] = bool(small["adapter_tokens_per_second"] and large["adapter_tokens_per_second"])
    if small["tokens_per_second"] > 0:
        figures["ratio"] = round(large["tokens_per_second"] / small["tokens_per_second"], 3)
    if figures["read_through_adapter"]:
        figures["adapter_ratio"] = round(large["adapter_tokens_per_second"] / small["adapter_tokens_per_second"], 3)
    held = "ratio" in figures and ratio_held(figures["ratio"]) and figures["read_through_adapter"]
    return {"engine_profile": figures, "held": held}

"""MPS limits on a real GPU: ``python -m bench.mps [--quick] [--out DIR]``.

A private MPS control daemon (its own pipe and log directories under /tmp, so a daemon the machine already runs is
left alone; quit at the end, its logs kept in ``DIR/mps-logs.txt``), then four measurements:

1. **Thread shares, raw.** Two MPS clients run the same fp16 matmul loop at once, first both unlimited (the
   baseline: about 1:1), then with ``CUDA_MPS_ACTIVE_THREAD_PERCENTAGE`` 25 and 75: their TFLOP/s ratio against 3.
2. **Pinned memory, raw.** A client started with ``CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=1024M`` allocates 512 MiB
   (must succeed) and 2048 MiB (must fail with CUDA's out-of-memory error).
3. **Thread shares through fleetpilot.** A real server (SQLite) and agent (replicas on ``cuda``, the NVML probe, the
   daemon's pipe directory in its environment, so it runs its replicas as MPS clients): tenant ``a`` holds 25 % of
   pool ``small``, tenant ``b`` 75 % of pool ``large`` (the tenants API), each replica starts with its pool's share
   (the supervisor's log says what holds), and closed-loop streamed generations saturate both pools: the tokens/s
   ratio large/small against 3. The built-in engine's model is small, so its speed may be bound by the CPU's kernel
   launches rather than by SMs, and then the ratio stays near 1 however MPS divides the SMs: (1) tells the two apart.
4. **A limit change, then a pinned-memory limit, through fleetpilot.** Under a steady 4 requests/s on ``small``,
   tenant ``a``'s share goes 25 → 50: MPS fixes a client's limits when it starts, so the supervisor replaces the
   replica (a new one with 50 %, then the old one drains). Measured: seconds until the new replica's limits hold, the
   fewest ready replicas meanwhile, the requests that failed. Then a 128-MiB memory quota: what the agent reported
   of the replica started under it.

Without CUDA or ``nvidia-cuda-mps-control`` the last line is ``{"bench": "mps", "skipped": REASON}``; a daemon that
does not start is skipped with its exact error and logs. Progress goes to stderr; the last stdout line is JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from functools import partial
from pathlib import Path
from typing import Any

import httpx

from bench.isolation import QUICK, cuda_device_count, noisy_flood, wait_for_replicas
from bench.mps_daemon import MpsUnavailable, PrivateMpsDaemon, private_mps_daemon
from fleetpilot.launch import AgentProcess, ServerProcess, free_port
from inference_agent.serving.replica_quota import MPS_MEMORY_ENV, MPS_THREADS_ENV

NODE_ID = "bench-mps"
SHARES = {"small": ("a", 25), "large": ("b", 75)}  # pool → (tenant, active thread percentage)
TARGET_RATIO = 3.0
RATIO_TOLERANCE = 0.25  # of the target: 2.25 to 3.75 holds
CHANGED_PERCENT = 50
PINNED_LIMIT_MIB = 1024
PINNED_TRIES_MIB = (512, 2048)
FLEET_PINNED_MIB = 128
GPU_LIMITS = re.compile(r"replica (\S+) of pool (\S+) GPU limits: (.*)")


def progress(message: str) -> None:
    print(f"[bench.mps] {message}", file=sys.stderr, flush=True)


# ---- the raw clients: this module run as ``--client matmul|alloc`` in a process of its own, one per MPS client


def matmul_client(seconds: float, start_at: float) -> dict[str, Any]:
    """fp16 4096² matmuls from ``start_at`` (wall clock, so that two clients overlap) for ``seconds``."""
    import torch

    size = 4096
    a, b = (torch.randn(size, size, device="cuda", dtype=torch.float16) for _ in range(2))
    c = torch.empty_like(a)
    torch.mm(a, b, out=c)
    torch.cuda.synchronize()
    time.sleep(max(0.0, start_at - time.time()))
    count, begun = 0, time.perf_counter()
    while time.perf_counter() - begun < seconds:
        for _ in range(20):
            torch.mm(a, b, out=c)
        torch.cuda.synchronize()
        count += 20
    elapsed = time.perf_counter() - begun
    late = time.time() - start_at - elapsed  # how late it began: the overlap's measure
    return {"tflops": round(count * 2 * size**3 / elapsed / 1e12, 2), "started_late_s": round(late, 3)}


def alloc_client(sizes_mib: list[int]) -> dict[str, Any]:
    """Allocate each size in turn on the GPU; what each allocation did."""
    import torch

    torch.zeros(1, device="cuda")  # the context first: its own memory is not what the limit is tried with
    results: dict[str, str] = {}
    for mib in sizes_mib:
        try:
            block = torch.empty(mib * 2**20, dtype=torch.uint8, device="cuda")
            block.fill_(1)
            torch.cuda.synchronize()
            results[str(mib)] = "ok"
            del block
            torch.cuda.empty_cache()
        except (torch.OutOfMemoryError, RuntimeError) as exc:
            results[str(mib)] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}"
    return {"allocations": results}


def run_clients(daemon: PrivateMpsDaemon, clients: list[tuple[dict[str, str], list[str]]]) -> list[dict[str, Any]]:
    """Start one ``--client`` process per (environment, arguments) at once; each one's JSON answer."""
    processes = [
        subprocess.Popen(
            [sys.executable, "-m", "bench.mps", "--client", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            text=True, env={**os.environ, **daemon.env, **env},
        )
        for env, args in clients
    ]  # fmt: skip
    answers = []
    for process in processes:
        out, err = process.communicate(timeout=120)
        lines = out.strip().splitlines()
        if process.returncode != 0 or not lines:
            answers.append({"failed": f"exit {process.returncode}: {err.strip()[-400:]}"})
        else:
            answers.append(json.loads(lines[-1]))
    return answers


def raw_thread_shares(daemon: PrivateMpsDaemon, seconds: float) -> dict[str, Any]:
    def pair(percentages: tuple[int | None, int | None]) -> list[dict[str, Any]]:
        start_at = time.time() + 10.0  # both contexts are up by then
        args = ["matmul", "--seconds", str(seconds), "--start-at", f"{start_at:.3f}"]
        envs = [{} if p is None else {MPS_THREADS_ENV: str(p)} for p in percentages]
        return run_clients(daemon, [(env, args) for env in envs])

    unlimited = pair((None, None))
    limited = pair((25, 75))
    progress(f"matmul clients: unlimited {unlimited}, 25/75 {limited}")
    figures: dict[str, Any] = {"unlimited": unlimited, "limited_25_75": limited}
    if all("tflops" in answer for answer in unlimited + limited):
        figures["baseline_ratio"] = round(unlimited[1]["tflops"] / unlimited[0]["tflops"], 3)
        figures["ratio"] = round(limited[1]["tflops"] / limited[0]["tflops"], 3)
        figures["held"] = abs(figures["ratio"] - TARGET_RATIO) <= RATIO_TOLERANCE * TARGET_RATIO
    return figures


def raw_pinned_memory(daemon: PrivateMpsDaemon) -> dict[str, Any]:
    env = {MPS_MEMORY_ENV: f"0={PINNED_LIMIT_MIB}M"}
    [answer] = run_clients(daemon, [(env, ["alloc", "--mib", ",".join(map(str, PINNED_TRIES_MIB))])])
    progress(f"pinned memory {PINNED_LIMIT_MIB} MiB: {answer}")
    allocations = answer.get("allocations", {})
    within, past = (allocations.get(str(mib), "") for mib in PINNED_TRIES_MIB)
    return {"limit_mib": PINNED_LIMIT_MIB, **answer, "held": within == "ok" and "OutOfMemory" in past}


# ---- through fleetpilot


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


def call(api: httpx.Client, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
    answer = api.request(method, path, json=body)
    answer.raise_for_status()
    return answer.json() if answer.content else None


@contextmanager
def fleet(daemon: PrivateMpsDaemon, folder: Path) -> Iterator[Fleet]:
    """The server, the tenants with their shares, and the agent with a ready replica of each pool."""
    with ServerProcess(f"sqlite:///{folder}/fleet.db", log_path=folder / "server.log") as server:
        api = httpx.Client(
            base_url=f"{server.url}/api/v1", headers={"Authorization": f"Bearer {server.admin_token}"}, timeout=10.0
        )
        keys = {}
        for pool, (tenant, percent) in SHARES.items():
            call(api, "POST", "/tenants", {"name": tenant, "slo_class": "standard"})
            call(api, "PUT", f"/tenants/{tenant}/quotas/{pool}", {"active_thread_percentage": percent})
            key = call(api, "POST", f"/tenants/{tenant}/keys", {"name": "bench"})["key"]
            keys[tenant] = {"Authorization": f"Bearer {key}"}
        agent = AgentProcess(
            collector=server.url, token=server.create_agent_token(NODE_ID), node_id=NODE_ID,
            spool_dir=folder / "spool", gpu_probe="nvml", workload="builtin",
            pools=",".join(f"{pool}=text:1" for pool in SHARES), serve_port=free_port(),
            log_path=folder / "agent.log",
            env={**daemon.env, "FLEETPILOT_REPLICA_DEVICE": "cuda", "FLEETPILOT_REPLICA_DRAIN_SECONDS": "2"},
        )  # fmt: skip
        with agent:
            wait_for_replicas(agent)
            yield Fleet(server, agent, api, keys)
        api.close()


def wait_until(condition: Callable[[], object], timeout_s: float, poll_s: float = 0.2) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(poll_s)
    return False


def fleet_thread_shares(f: Fleet, window_s: float) -> dict[str, Any]:
    """Both pools saturated at once; each one's streamed tokens/s."""
    started = {pool: wait_until(partial(f.gpu_limit_lines, pool), 60.0) for pool in SHARES}
    limits = {pool: (f.gpu_limit_lines(pool) or [("", "none logged")])[-1][1] for pool in SHARES}
    progress(f"replicas' GPU limits as the agent logged them: {limits}")
    serve_url = f.agent.serve_url
    assert serve_url is not None
    config = replace(QUICK, noisy_clients=16, noisy_max_tokens=256)
    with (
        noisy_flood(serve_url, config, f.keys["a"], pool="small") as small,
        noisy_flood(serve_url, config, f.keys["b"], pool="large") as large,
    ):
        time.sleep(3.0)
        before, begun = (small.read(), large.read()), time.perf_counter()
        time.sleep(window_s)
        after, elapsed = (small.read(), large.read()), time.perf_counter() - begun
    rates = {pool: (after[k]["tokens"] - before[k]["tokens"]) / elapsed for k, pool in enumerate(SHARES)}
    progress(f"tokens/s under saturation: {rates}")
    figures: dict[str, Any] = {
        "tokens_per_second": {pool: round(rate, 1) for pool, rate in rates.items()},
        "limits_logged": limits if all(started.values()) else {**limits, "missing": "no GPU limits line in 60 s"},
    }
    if rates["small"] > 0:
        figures["ratio"] = round(rates["large"] / rates["small"], 3)
        figures["held"] = abs(figures["ratio"] - TARGET_RATIO) <= RATIO_TOLERANCE * TARGET_RATIO
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


def run(quick: bool, out: Path | None) -> dict[str, Any]:
    if not cuda_device_count():
        return {"bench": "mps", "skipped": "torch sees no CUDA device"}
    figures: dict[str, Any] = {"bench": "mps", "baseline": "the same two clients without limits (about 1:1)"}
    daemon: PrivateMpsDaemon | None = None
    try:
        with private_mps_daemon() as daemon, tempfile.TemporaryDirectory(prefix="bench-mps-") as folder:
            progress(f"private MPS daemon at {daemon.base}")
            figures["raw_thread_shares"] = raw_thread_shares(daemon, 4.0 if quick else 10.0)
            figures["raw_pinned_memory"] = raw_pinned_memory(daemon)
            with fleet(daemon, Path(folder)) as f:
                figures["fleet_thread_shares"] = fleet_thread_shares(f, 8.0 if quick else 20.0)
                figures["limit_change"] = fleet_limit_change(f, 45.0)
                figures["fleet_pinned_memory"] = fleet_pinned_memory(f, 25.0)
    except MpsUnavailable as exc:
        return {"bench": "mps", "skipped": f"the MPS daemon cannot run here: {exc}"}
    finally:
        if out is not None and daemon is not None:
            (out / "mps-logs.txt").write_text(daemon.final_logs)
    figures["ratio"] = figures["raw_thread_shares"].get("ratio")
    change = figures["limit_change"]
    figures["target_met"] = bool(
        figures["raw_thread_shares"].get("held")
        and figures["raw_pinned_memory"]["held"]
        and change["new_limits_held"]
        and change["min_ready_replicas"]
        and not change["requests_failed"]
    )
    return figures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.mps", description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="4 s matmul and 8 s token windows instead of 10 and 20")
    parser.add_argument("--out", type=Path, help="where the daemon's logs go (mps-logs.txt)")
    parser.add_argument("--client", choices=["matmul", "alloc"], help=argparse.SUPPRESS)  # one MPS client process
    parser.add_argument("--seconds", type=float, default=4.0, help=argparse.SUPPRESS)
    parser.add_argument("--start-at", type=float, default=0.0, help=argparse.SUPPRESS)
    parser.add_argument("--mib", default="", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.client == "matmul":
        answer = matmul_client(args.seconds, args.start_at)
    elif args.client == "alloc":
        answer = alloc_client([int(m) for m in args.mib.split(",") if m])
    else:
        answer = run(args.quick, args.out)
    print(json.dumps(answer))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

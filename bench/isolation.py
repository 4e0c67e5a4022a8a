"""Isolation benchmark (CONTRACT section 12): ``python -m bench.isolation [--quick]``.

A real ``fleetpilot server`` (SQLite) and one real agent running the built-in workload with two pools on this node:
``vision`` (classify, one replica) and ``chat`` (text, one replica); the supervisor gives each replica its CPU share
(``placement.py``: on 2 cores, one core each, with or without tenant quotas). Three conditions, measured over loopback:

1. ``alone``: the tenant ``fast`` sends one-image ``POST /v1/classify`` at a steady open-loop rate.
2. ``unisolated``: the same, while the tenant ``noisy`` floods ``POST /v1/completions`` (long streamed generations,
   many clients in closed loop); both tenants are ``standard`` without quotas (unlimited).
3. ``isolated``: the same flood after the tenants API made ``fast`` latency_critical and ``noisy`` batch with a rate,
   concurrency and compute-share quota on ``chat`` (15 % of the node); the agent takes them from its next ingest
   answer (it pushes once a second): admission limits in its front end, and the ``chat`` replica capped at its
   share of the node's cores (cgroup ``cpu.max``, or the v1 CFS quota where the cpu controller is v1).

``--device cuda`` (``auto``: cuda where torch sees a GPU) runs the replicas on the GPU, the agent with the NVML probe
so that the server plans the ``chat`` replica's share as an MPS thread percentage; ``--mps auto`` starts a private
MPS daemon for it (``bench/lib/mps_daemon.py``), and where none can start the output's ``gpu_share`` says so and only
admission isolates. Under MPS a new share means a new replica, so each switch waits until the pools have replaced
theirs. Without a GPU, ``--device cuda`` answers ``{"bench": "isolation", "skipped": REASON}``.

The conditions alternate in rounds, each round starting one condition later, so that a drift in what else runs on
the machine weighs on all three alike. The fast tenant's load comes from a lean asyncio client in a process of its
own (``bench/lib/open_loop.py``), open loop: each request goes at its scheduled time whatever the answers before it,
and its latency runs from its send to its answer, so that the client's own delay in sending (reported as
``send_lag_p99_ms``) is not counted as the server's. Beside it, ``replica_p99_ms`` is the same requests as the
classify replica timed them (from the front end's taking them), which splits the latency by stage. Each condition's
p99 is its median round's (a burst of other work on a shared machine that hits one round of twelve does not make
it; the pooled p99 is reported beside); the inflations come with the central 90 % of a bootstrap over paired rounds,
and the verdict holds only when that interval does (``bench/lib/tail_verdict.py``). The noisy tenant's tokens/s
counts streamed tokens received inside the windows; a 429 makes its client wait ``Retry-After``, as a well-behaved
client does. Progress goes to stderr; the last stdout line is JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from collections import Counter
from collections.abc import Mapping
from contextlib import ExitStack
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import httpx
import psutil

from bench.lib.cuda import cuda_device_count
from bench.lib.fast_tenant import Window, classify_plan, replica_latencies_ms
from bench.lib.mps_daemon import MpsUnavailable, private_mps_daemon
from bench.lib.noisy_flood import Flood, noisy_flood
from bench.lib.open_loop import LoadPlan, OpenLoopClient, Shot
from bench.lib.progress import progress_line
from bench.lib.replicas import wait_for_replicas
from bench.lib.tail_verdict import Verdict, bootstrap_inflation, judge, per_round_quantiles, round_quantile
from fleetpilot.launch import AgentProcess, ServerProcess
from inference_agent.ports import free_port
from wire.percentile import percentile

NODE_ID = "bench-isolation"
POOLS = "chat=text:1,vision=classify:1"
FAST, NOISY = "fast", "noisy"
TARGET_INFLATION_ISOLATED = 0.10
TARGET_INFLATION_UNISOLATED = 0.50
BOOTSTRAP_DRAWS = 1000
AGENT_APPLY_S = 2.5  # the agent pushes once a second and takes the tenants from the ingest answer


progress = progress_line("isolation")


@dataclass(frozen=True)
class BenchConfig:
    rounds: int
    window_s: float  # each condition's measured window in each round
    ramp_s: float  # the flood runs this long before a window opens, so the text replica is saturated
    fast_rps: float
    noisy_clients: int
    noisy_max_tokens: int
    noisy_rate_rps: float  # the isolated phase's quota for noisy on chat
    noisy_max_concurrency: int
    noisy_share_percent: float  # its compute share: on this CPU node, of the node's cores


FULL = BenchConfig(
    rounds=12, window_s=8.0, ramp_s=2.0, fast_rps=25.0, noisy_clients=24, noisy_max_tokens=512,
    noisy_rate_rps=1.0, noisy_max_concurrency=4, noisy_share_percent=15.0,
)  # fmt: skip
QUICK = BenchConfig(
    rounds=1, window_s=5.0, ramp_s=2.0, fast_rps=25.0, noisy_clients=24, noisy_max_tokens=512,
    noisy_rate_rps=1.0, noisy_max_concurrency=4, noisy_share_percent=15.0,
)  # fmt: skip


@dataclass(frozen=True)
class Run:
    """What the rounds send through: the agent (its replicas' ledgers), its serving URL, the fast tenant's client."""

    agent: AgentProcess
    serve_url: str
    client: OpenLoopClient

    def send(self, plan: LoadPlan, window: Window) -> list[Shot]:
        """Run the fast tenant's plan, counting the agent's CPU seconds meanwhile (its front end's load)."""
        assert self.agent.process is not None
        agent = psutil.Process(self.agent.process.pid)
        before, started = sum(agent.cpu_times()[:2]), time.perf_counter()
        shots = self.client.run(plan)
        window.agent_cpu_s += sum(agent.cpu_times()[:2]) - before
        window.timed_s += time.perf_counter() - started
        return shots


def measure(
    window: Window, run: Run, config: BenchConfig, keys: Mapping[str, Mapping[str, str]], *, flood: bool
) -> None:
    """One round of a condition: optionally start the flood and let it ramp, then the fast tenant's window."""
    plan = partial(classify_plan, run.serve_url, "vision", keys[FAST], config.fast_rps, config.window_s)
    if not flood:
        shots = run.send(plan(), window)
    else:
        with noisy_flood(run.serve_url, Flood(config.noisy_clients, config.noisy_max_tokens), keys[NOISY]) as counters:
            time.sleep(config.ramp_s)
            before, started = counters.read(), time.perf_counter()
            shots = run.send(plan(), window)
            after = counters.read()
            window.seconds += time.perf_counter() - started
        window.noisy += Counter({key: after[key] - before[key] for key in after})
    window.add_round(shots, replica_latencies_ms(run.agent, "vision", len(shots)))


@dataclass(frozen=True)
class Phase:
    """A condition's figures: the fast tenant's latency (round by round, the client's send lag and the replica's own
    timing of it beside), and the noisy tenant's throughput and refusals."""

    name: str
    rounds: list[list[float]]  # ms from send to answer, per round
    p99_ms: float  # of the median round (tail_verdict.round_quantile)
    p99_pooled_ms: float  # of all rounds pooled
    p50_ms: float
    send_lag_p99_ms: float
    replica_p99_ms: float | None
    agent_cpu_share: float  # of one core, while the fast tenant's windows ran
    fast_over_1s: int
    fast_failures: dict[str, int]
    noisy_tokens_per_second: float
    noisy_admitted: int
    noisy_refused_429: int

    @classmethod
    def of(cls, name: str, window: Window) -> Phase:
        ms = window.latencies_ms
        if not ms:
            raise RuntimeError(f"{name}: every fast request failed: {dict(window.failures)}")
        tokens_per_second = window.noisy["tokens"] / window.seconds if window.seconds else 0.0
        replica = percentile(window.replica_ms, 99) if window.replica_ms else None
        return cls(
            name, window.rounds, round_quantile(window.rounds, 99), percentile(ms, 99), percentile(ms, 50),
            percentile(window.send_lag_ms, 99), replica,
            window.agent_cpu_s / window.timed_s, sum(m >= 1000 for m in ms), dict(window.failures),
            tokens_per_second, window.noisy["admitted"], window.noisy["refused_429"],
        )  # fmt: skip

    @property
    def fast_ok(self) -> int:
        return sum(len(latencies) for latencies in self.rounds)

    def describe(self) -> str:
        per_round = " ".join(f"{p:.0f}" for p in per_round_quantiles(self.rounds, 99))
        return (
            f"{self.name}: fast p99 {self.p99_ms:.1f} ms in the median round (per round: {per_round}; pooled "
            f"{self.p99_pooled_ms:.1f} ms), p50 {self.p50_ms:.1f} ms "
            f"({self.fast_ok} ok, {self.fast_over_1s} over 1 s, failed {self.fast_failures}); the replica's p99 "
            f"{self.replica_p99_ms or 0:.1f} ms, send lag p99 {self.send_lag_p99_ms:.1f} ms, the agent's CPU "
            f"{self.agent_cpu_share:.2f} of a core; noisy "
            f"{self.noisy_tokens_per_second:.0f} tokens/s, {self.noisy_admitted} admitted, "
            f"{self.noisy_refused_429} × 429"
        )


class Tenants:
    """The two tenants on the server, each with an API key (``keys``: the headers its requests carry), switched
    between unisolated and isolated through the REST API, as an operator would."""

    def __init__(self, server: ServerProcess, config: BenchConfig) -> None:
        self.url = f"{server.url}/api/v1/tenants"
        self.headers = {"Authorization": f"Bearer {server.admin_token}"}
        self.quota = {
            "rate_rps": config.noisy_rate_rps,
            "max_concurrency": config.noisy_max_concurrency,
            "active_thread_percentage": config.noisy_share_percent,
        }
        self.keys: dict[str, dict[str, str]] = {}
        for name in (FAST, NOISY):
            self._call("POST", "", {"name": name, "slo_class": "standard"})
            key = self._call("POST", f"/{name}/keys", {"name": "bench"})["key"]
            self.keys[name] = {"Authorization": f"Bearer {key}"}
        self.isolated = False

    def isolate(self, on: bool) -> None:
        if on == self.isolated:
            return
        self._call("PATCH", f"/{FAST}", {"slo_class": "latency_critical" if on else "standard"})
        self._call("PATCH", f"/{NOISY}", {"slo_class": "batch" if on else "standard"})
        if on:
            self._call("PUT", f"/{NOISY}/quotas/chat", self.quota)
        else:
            self._call("DELETE", f"/{NOISY}/quotas/chat", None)
        self.isolated = on
        time.sleep(AGENT_APPLY_S)

    def _call(self, method: str, path: str, body: dict[str, Any] | None) -> Any:
        answer = httpx.request(method, f"{self.url}{path}", json=body, headers=self.headers, timeout=10.0)
        answer.raise_for_status()
        return answer.json() if answer.content else None


@dataclass(frozen=True)
class Device:
    """Where the replicas run: ``cpu``, or ``cuda`` with the environment that joins an MPS daemon (empty: none)."""

    name: str
    mps_env: Mapping[str, str] = field(default_factory=dict)

    def agent_env(self) -> dict[str, str]:
        return {"FLEETPILOT_REPLICA_DEVICE": self.name, **self.mps_env}

    @property
    def gpu_probe(self) -> str:
        return "nvml" if self.name == "cuda" else "none"  # the server plans MPS limits for the GPUs a node reports


def run_phases(config: BenchConfig, folder: Path, device: Device = Device("cpu")) -> list[Phase]:
    """Start the server and the agent, then the rounds; the three conditions' figures."""
    windows = {name: Window() for name in ("alone", "unisolated", "isolated")}
    with ServerProcess(f"sqlite:///{folder}/fleet.db", log_path=folder / "server.log") as server:
        agent = AgentProcess(
            collector=server.url,
            token=server.create_agent_token(NODE_ID),
            node_id=NODE_ID,
            spool_dir=folder / "spool",
            gpu_probe=device.gpu_probe,
            workload="builtin",
            pools=POOLS,
            serve_port=free_port(),
            log_path=folder / "agent.log",
            env={"FLEETPILOT_REPLICA_DRAIN_SECONDS": "2", **device.agent_env()},
        )
        with agent, OpenLoopClient() as client:
            tenants = Tenants(server, config)
            wait_for_replicas(agent)
            assert agent.serve_url is not None
            run = Run(agent, agent.serve_url, client)
            progress(f"agent and replicas ready ({POOLS}); warming the fast path")
            client.run(classify_plan(run.serve_url, "vision", tenants.keys[FAST], config.fast_rps, 1.0))
            names = list(windows)
            for number in range(config.rounds):
                # each round starts one condition later (A U I, U I A, I A U, ...): none always runs last
                for name in names[number % 3 :] + names[: number % 3]:
                    if name != "alone":
                        tenants.isolate(name == "isolated")
                        wait_for_replicas(agent)  # under MPS a new share takes a new replica
                    measure(windows[name], run, config, tenants.keys, flood=name != "alone")
                progress(f"round {number + 1}/{config.rounds} done")
            progress("stopping the agent (its replicas drain)")
    for line in (folder / "agent.log").read_text().splitlines():
        if "CPU limits" in line or "GPU limits" in line:
            progress(f"agent: {line.strip()[-160:]}")  # the caps as the agent applied them, with why not where not
    phases = [Phase.of(name, window) for name, window in windows.items()]
    for phase in phases:
        progress(phase.describe())
    return phases


def figures(config: BenchConfig, phases: list[Phase], load_average: list[float], device: str) -> dict[str, Any]:
    alone, unisolated, isolated = phases
    spread = {p.name: bootstrap_inflation(p.rounds, alone.rounds, 99, draws=BOOTSTRAP_DRAWS) for p in phases[1:]}
    targets = (TARGET_INFLATION_ISOLATED, TARGET_INFLATION_UNISOLATED)
    judged = judge(spread["isolated"], spread["unisolated"], *targets, rounds=len(alone.rounds))
    per_round = {p.name: per_round_quantiles(p.rounds, 99) for p in phases}
    return {
        "bench": "isolation",
        "device": device,
        "p99_alone_ms": round(alone.p99_ms, 1),
        "p99_noisy_unisolated_ms": round(unisolated.p99_ms, 1),
        "p99_noisy_isolated_ms": round(isolated.p99_ms, 1),
        "inflation_isolated": round(spread["isolated"].value, 3),
        "inflation_unisolated": round(spread["unisolated"].value, 3),
        # [low, value, high]: the central 90 % of the inflation over draws of paired rounds (tail_verdict.py)
        "inflation_isolated_interval": spread["isolated"].rounded(),
        "inflation_unisolated_interval": spread["unisolated"].rounded(),
        "verdict": judged.verdict.value,
        "verdict_reason": judged.reason,
        "p99_pooled_ms": {p.name: round(p.p99_pooled_ms, 1) for p in phases},
        "p99_per_round_ms": {name: [round(p, 1) for p in values] for name, values in per_round.items()},
        "p99_per_round_range_ms": {name: [round(min(v), 1), round(max(v), 1)] for name, v in per_round.items()},
        "replica_p99_ms": {p.name: round(p.replica_p99_ms, 1) if p.replica_p99_ms else None for p in phases},
        "send_lag_p99_ms": {p.name: round(p.send_lag_p99_ms, 1) for p in phases},
        "agent_cpu_share": {p.name: round(p.agent_cpu_share, 3) for p in phases},
        "noisy_tokens_per_second_unisolated": round(unisolated.noisy_tokens_per_second, 1),
        "noisy_tokens_per_second_isolated": round(isolated.noisy_tokens_per_second, 1),
        "noisy_throughput_cost": round(1 - isolated.noisy_tokens_per_second / unisolated.noisy_tokens_per_second, 3)
        if unisolated.noisy_tokens_per_second
        else None,
        "p50_ms": {p.name: round(p.p50_ms, 1) for p in phases},
        "fast_requests": {p.name: p.fast_ok for p in phases},
        "fast_over_1s": {p.name: p.fast_over_1s for p in phases},
        "fast_failures": {p.name: p.fast_failures for p in phases},
        "noisy_admitted": {p.name: p.noisy_admitted for p in phases[1:]},
        "noisy_refused_429": {p.name: p.noisy_refused_429 for p in phases[1:]},
        "baseline": "p99_alone_ms",
        "ratio": round(spread["isolated"].value, 3),
        "config": config.__dict__,
        "load_average_1m": load_average,
        "target_met": judged.verdict is Verdict.MET,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.isolation", description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="one round of 5 s windows instead of 12 of 8 s")
    parser.add_argument(
        "--device", choices=["cpu", "cuda", "auto"], default="cpu",
        help="where the replicas run (auto: cuda when torch sees a GPU); cpu by default, the figures' baseline",
    )  # fmt: skip
    parser.add_argument(
        "--mps", choices=["auto", "off"], default="auto",
        help="on cuda, start a private MPS daemon so the compute share holds (auto; without one, admission only)",
    )  # fmt: skip
    args = parser.parse_args(argv)
    config = QUICK if args.quick else FULL
    name = args.device if args.device != "auto" else ("cuda" if cuda_device_count() else "cpu")
    if name == "cuda" and not cuda_device_count():
        print(json.dumps({"bench": "isolation", "skipped": "--device cuda: torch sees no CUDA device"}))
        return 0
    load_before = os.getloadavg()[0]  # with the 1-minute load after: how busy the shared machine was
    with ExitStack() as stack:
        device, gpu_share = Device(name), None
        if name == "cuda" and args.mps == "auto":
            try:
                daemon = stack.enter_context(private_mps_daemon())
                device, gpu_share = Device(name, daemon.env), f"MPS: chat capped at {config.noisy_share_percent:g} %"
            except MpsUnavailable as exc:
                gpu_share = f"no MPS ({exc}): the GPU replicas share the SMs unlimited; admission limits only"
        elif name == "cuda":
            gpu_share = "--mps off: the GPU replicas share the SMs unlimited; admission limits only"
        if gpu_share is not None:
            progress(gpu_share)
        folder = stack.enter_context(tempfile.TemporaryDirectory(prefix="bench-isolation-"))
        phases = run_phases(config, Path(folder), device)
    result = figures(config, phases, [round(load_before, 2), round(os.getloadavg()[0], 2)], name)
    print(json.dumps(result | ({"gpu_share": gpu_share} if gpu_share is not None else {})))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

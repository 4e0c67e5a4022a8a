"""The fast tenant of ``bench.isolation``: one-image classify requests sent open loop by the lean client of
``open_loop.py``, and what one condition gathers of them round by round — the latencies from each request's send to
its answer, the client's own delay in sending, and the same requests as the classify replica's ledger timed them
(from the front end's taking the request to the replica's answer), which splits the latency by stage."""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field

import httpx
import psutil

from bench.lib.open_loop import LoadPlan, Shot
from fleetpilot.launch import AgentProcess
from inference_agent.serving.replica.key import REPLICA_KEY_ENV

IMAGE = [[[0.5] * 64 for _ in range(64)] for _ in range(3)]  # one 3×64×64 input: the smallest classify request
START_AHEAD_S = 0.2  # the plan reaches the client process, which opens its connections, before the first send


def classify_plan(serve_url: str, pool: str, key: Mapping[str, str], rate_rps: float, window_s: float) -> LoadPlan:
    """``window_s`` of classify requests at ``rate_rps`` to ``pool`` through the front end, with the tenant's key."""
    body = json.dumps({"model": pool, "inputs": [IMAGE]}).encode()
    count = round(rate_rps * window_s)
    return LoadPlan(f"{serve_url}/v1/classify", body, dict(key), rate_rps, count, time.monotonic() + START_AHEAD_S)


@dataclass
class Window:
    """What one condition gathered over its rounds."""

    rounds: list[list[float]] = field(default_factory=list)  # per round: ms from send to answer, answered 200
    send_lag_ms: list[float] = field(default_factory=list)  # the client's own delay past each scheduled send
    replica_ms: list[float] = field(default_factory=list)  # as the replica's ledger timed the same requests
    failures: Counter[str] = field(default_factory=Counter)  # by status code or exception name
    seconds: float = 0.0  # flooded seconds, for the noisy tenant's tokens/s
    timed_s: float = 0.0  # seconds of the fast tenant's windows
    agent_cpu_s: float = 0.0  # the agent's CPU seconds within them: its front end's work
    noisy: Counter[str] = field(default_factory=Counter)  # NoisyCounters.FIELDS received inside the windows

    def add_round(self, shots: list[Shot], replica_ms: list[float]) -> None:
        self.rounds.append([s.answer_s * 1000 for s in shots if s.status == 200])
        self.send_lag_ms += [s.send_lag_s * 1000 for s in shots]
        self.replica_ms += replica_ms
        self.failures += Counter(s.error or str(s.status) for s in shots if s.status != 200)

    @property
    def latencies_ms(self) -> list[float]:
        return [latency for round_ in self.rounds for latency in round_]


def replica_latencies_ms(agent: AgentProcess, pool: str, last: int) -> list[float]:
    """The latencies of the ``last`` requests the pool's replica finished (within its ledger's trailing 10 s), as it
    timed them: from the front end's taking the request (its queue included) to the replica's answer; empty when
    the replica cannot be read (between replicas)."""
    assert agent.process is not None
    for child in psutil.Process(agent.process.pid).children():
        try:
            argv, environ = child.cmdline(), child.environ()
        except psutil.Error:
            continue
        if "serving.replica" not in " ".join(argv) or argv[argv.index("--pool") + 1] != pool:
            continue
        url = f"http://127.0.0.1:{argv[argv.index('--port') + 1]}/stats"
        try:
            answer = httpx.get(url, headers={"Authorization": f"Bearer {environ[REPLICA_KEY_ENV]}"}, timeout=5.0)
            samples = answer.json()["latency"]["samples_seconds"]
        except (httpx.HTTPError, KeyError, ValueError):
            return []
        return [s * 1000 for s in samples[-last:]]
    return []

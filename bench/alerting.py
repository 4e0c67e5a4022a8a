"""Alerting benchmark (CONTRACT section 12): ``python -m bench.alerting [--quick]``.

A real ``fleetpilot server`` (SQLite, default settings: rules evaluated every second) takes pushes from simulated
nodes, one GPU each, every 500 ms. Each node's GPU flips between hot (90 °C) and cool (60 °C) after random dwells of
3–8 s, against a rule ``gpu_temperature_celsius > 85`` (``for_seconds`` 0), so alerts keep firing and resolving.
Every notification goes to a signed webhook on a local receiver in this process. Halfway through, the server is
restarted (SIGTERM, then a new process on the same database); while it is away the nodes keep their samples in a
spool and resend them, as the agent does, and their GPUs hold their state (a flip nobody can see is no condition).

Each flip whose sample the server acknowledged is a condition that must be notified: a firing or resolved alert for
that node, received after it. ``condition_to_delivery`` runs from the sample's timestamp (when the GPU crossed the
threshold) to the receiver's arrival time; ``lost`` counts conditions never notified by the end of a drain period.
The baseline is what an ideal evaluator polling at the same interval with instant delivery would show: a condition
arises at a uniformly random moment between evaluations, so its p99 wait is 0.99 × the interval; ``ratio`` is ours
over it. Progress goes to stderr; the last line of stdout is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from alerting.receiver import LOOPBACK_NETWORKS, Received, WebhookReceiver
from bench.lib.figures import figure
from bench.lib.progress import progress_line
from fleetpilot.launch import ServerProcess
from migrations import runner
from wire.percentile import percentile

SECRET = "bench-alerting-secret-0123456789"
RULE = "BenchGpuHot"
TICK_SECONDS = 0.5
HOT, COOL, THRESHOLD = 90.0, 60.0, 85.0
DEFAULT_EVALUATION_INTERVAL_SECONDS = 1.0  # ServerSettings.alert_evaluation_interval_seconds
TARGET_P99_SECONDS = 2.0
# The receiver listens on loopback, which a server refuses as a webhook target unless it is allowed.
RECEIVER_ON_LOOPBACK = {"FLEETPILOT_WEBHOOK_ALLOWED_NETWORKS": json.dumps(LOOPBACK_NETWORKS)}


progress = progress_line("alerting")


@dataclass(frozen=True)
class Condition:
    node: str
    status: str  # firing | resolved
    sample_ts: float
    acked_at: float


@dataclass
class Node:
    """One simulated node: its GPU's state, its spool of unacknowledged samples and its acknowledged flips."""

    id: str
    token: str
    rng: random.Random
    hot: bool = False
    seq: int = 0
    flip_at: float = 0.0
    spool: list[dict[str, Any]] = field(default_factory=list)
    pending_flip: tuple[str, float] | None = None  # (status, sample ts) of a flip not yet acknowledged
    conditions: list[Condition] = field(default_factory=list)

    def tick(self, now: float, *, frozen: bool) -> None:
        if not frozen and now >= self.flip_at:
            if self.flip_at:  # the first tick only schedules
                self.hot = not self.hot
                if self.pending_flip is None:
                    self.pending_flip = ("firing" if self.hot else "resolved", now)
            self.flip_at = now + self.rng.uniform(3.0, 8.0)
        self.seq += 1
        metrics = {"gpu_temperature_celsius": HOT if self.hot else COOL, "gpu_utilization_ratio": 0.7}
        self.spool.append({"seq": self.seq, "ts": now, "device": 0, "metrics": metrics})

    def push(self, client: httpx.Client, url: str) -> None:
        batch = self.spool[-600:]  # the last 5 minutes, as a bounded spool keeps them
        try:
            answer = client.post(
                f"{url}/api/v1/ingest",
                json={"node_id": self.id, "samples": batch},
                headers={"Authorization": f"Bearer {self.token}"},
            )
        except httpx.HTTPError:
            return
        if answer.status_code != 200:
            return
        self.spool.clear()
        if self.pending_flip is not None:
            status, ts = self.pending_flip
            self.conditions.append(Condition(self.id, status, ts, time.time()))
            self.pending_flip = None


@dataclass(frozen=True)
class Config:
    nodes: int
    duration_s: float
    drain_s: float
    seed: int


def parse_config(argv: list[str] | None) -> Config:
    parser = argparse.ArgumentParser(prog="python -m bench.alerting", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="fewer nodes, shorter (under 60 s in all)")
    parser.add_argument("--nodes", type=int, default=None, help="simulated nodes (default 40, quick 15)")
    parser.add_argument("--duration", type=float, default=None, help="seconds of load (default 60, quick 20)")
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args(argv)
    return Config(
        nodes=args.nodes or (15 if args.quick else 40),
        duration_s=args.duration or (20.0 if args.quick else 60.0),
        drain_s=6.0 if args.quick else 10.0,
        seed=args.seed,
    )


def api(server: ServerProcess, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
    response = httpx.request(
        method,
        f"{server.url}/api/v1{path}",
        json=body,
        headers={"Authorization": f"Bearer {server.admin_token}"},
        timeout=30.0,
    )
    response.raise_for_status()
    return response.json()


def set_up(server: ServerProcess, receiver: WebhookReceiver, config: Config) -> list[Node]:
    api(server, "POST", "/webhooks", {"url": receiver.url, "secret": SECRET, "name": "bench"})
    rule = {"name": RULE, "kind": "threshold", "metric": "gpu_temperature_celsius", "op": ">", "threshold": THRESHOLD}
    api(server, "POST", "/alert-rules", rule)
    rng = random.Random(config.seed)
    return [
        Node(f"node-{i:03d}", server.create_agent_token(f"node-{i:03d}"), random.Random(rng.random()))
        for i in range(config.nodes)
    ]


class Load:
    """Ticks every node every 500 ms and pushes each node's spool, a few nodes at a time, on its own thread."""

    def __init__(self, nodes: list[Node]) -> None:
        self.nodes = nodes
        self.url = ""
        self.frozen = threading.Event()
        self.stopped = threading.Event()
        self._client = httpx.Client(timeout=5.0)
        self._pool = ThreadPoolExecutor(max_workers=4)
        self._thread = threading.Thread(target=self._run, name="load", daemon=True)

    def start(self, url: str) -> None:
        self.url = url
        self._thread.start()

    def _run(self) -> None:
        next_tick = time.monotonic()
        while not self.stopped.is_set():
            now = time.time()
            for node in self.nodes:
                node.tick(now, frozen=self.frozen.is_set())
            list(self._pool.map(lambda n: n.push(self._client, self.url), self.nodes))
            next_tick += TICK_SECONDS
            time.sleep(max(0.0, next_tick - time.monotonic()))

    def stop(self) -> None:
        self.stopped.set()
        self._thread.join()
        self._pool.shutdown()
        self._client.close()


def restart(server: ServerProcess, load: Load) -> tuple[ServerProcess, float]:
    """SIGTERM the server and start a new one on the same database; the GPUs hold their state meanwhile."""
    load.frozen.set()
    started = time.monotonic()
    server.stop()
    fresh = ServerProcess(server.database_url, admin_token=server.admin_token, port=server.port, env=server.env).start()
    down_s = time.monotonic() - started
    load.frozen.clear()
    return fresh, down_s


@dataclass(frozen=True)
class Notified:
    node: str
    status: str
    at: float


def notified_alerts(received: list[Received]) -> list[Notified]:
    out: list[Notified] = []
    for r in received:
        payload = r.payload
        if payload.get("groupLabels", {}).get("alertname") != RULE:
            continue
        out.extend(Notified(a["labels"]["node"], a["status"], r.at) for a in payload["alerts"])
    return sorted(out, key=lambda n: n.at)


def match(conditions: list[Condition], notified: list[Notified]) -> tuple[list[float], list[float], int]:
    """Per node in order: each condition takes the first unused notification of its status that came after its
    sample; (latencies from the sample, latencies from the acknowledgement, conditions never notified)."""
    by_node: dict[str, list[Notified]] = {}
    for n in notified:
        by_node.setdefault(n.node, []).append(n)
    from_sample: list[float] = []
    from_ack: list[float] = []
    lost = 0
    used: set[int] = set()
    for c in sorted(conditions, key=lambda c: (c.node, c.sample_ts)):
        candidates = by_node.get(c.node, [])
        found = next(
            (i for i, n in enumerate(candidates) if id(n) not in used and n.status == c.status and n.at >= c.sample_ts),
            None,
        )
        if found is None:
            lost += 1
            continue
        chosen = candidates[found]
        used.add(id(chosen))
        from_sample.append(chosen.at - c.sample_ts)
        from_ack.append(max(0.0, chosen.at - c.acked_at))
    return from_sample, from_ack, lost


def run(config: Config) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="bench-alerting-") as folder, WebhookReceiver(SECRET) as receiver:
        url = f"sqlite:///{Path(folder)}/bench.db"
        runner.upgrade(url)
        server = ServerProcess(url, env=RECEIVER_ON_LOOPBACK).start()
        try:
            nodes = set_up(server, receiver, config)
            load = Load(nodes)
            load.start(server.url)
            progress(f"{config.nodes} nodes flipping for {config.duration_s:.0f} s; restart at half time")
            time.sleep(config.duration_s / 2)
            server, down_s = restart(server, load)
            progress(f"server restarted ({down_s:.1f} s away)")
            time.sleep(config.duration_s / 2)
            load.frozen.set()  # the last flips must have time to be notified
            time.sleep(config.drain_s)
            load.stop()
        finally:
            server.stop()
        accepted = receiver.accepted()
        all_received = list(receiver.received)
    conditions = [c for n in nodes for c in n.conditions]
    notified = notified_alerts(accepted)
    from_sample, from_ack, lost = match(conditions, notified)
    p99 = percentile(from_sample, 99) if from_sample else math.nan
    baseline = 0.99 * DEFAULT_EVALUATION_INTERVAL_SECONDS
    return {
        "bench": "alerting",
        "nodes": config.nodes,
        "duration_s": config.duration_s,
        "conditions": len(conditions),
        "notifications": sum(1 for r in accepted if r.payload.get("groupLabels", {}).get("alertname") == RULE),
        "alerts_notified": len(notified),
        "condition_to_delivery_p50_s": figure(percentile(from_sample, 50)) if from_sample else None,
        "condition_to_delivery_p99_s": figure(p99),
        "condition_to_delivery_max_s": figure(max(from_sample)) if from_sample else None,
        "acknowledged_to_delivery_p99_s": figure(percentile(from_ack, 99)) if from_ack else None,
        "lost": lost,
        "duplicates": len(notified) - len(from_sample),
        "bad_signatures": sum(1 for r in all_received if not r.signature_ok),
        "restart_down_s": figure(down_s, 2),
        "evaluation_interval_s": DEFAULT_EVALUATION_INTERVAL_SECONDS,
        "baseline": "ideal polling evaluator at the same interval, instant delivery: p99 = 0.99 × interval",
        "baseline_condition_to_delivery_p99_s": baseline,
        "ratio": figure(p99 / baseline),
        "target_p99_s": TARGET_P99_SECONDS,
    }


def main(argv: list[str] | None = None) -> int:
    result = run(parse_config(argv))
    progress(
        f"{result['conditions']} conditions, {result['notifications']} notifications, p99 "
        f"{result['condition_to_delivery_p99_s']} s, lost {result['lost']}"
    )
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())

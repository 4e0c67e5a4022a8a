"""Remote-write benchmark (CONTRACT sections 12, 13): ``python -m bench.remote_write [--quick]``.

A real ``fleetpilot server`` on loopback (SQLite) is sent one simulated fleet's scrapes twice, from another process:

1. **remote write**: per node and scrape, what dcgm-exporter (5 families × 8 GPUs) and vLLM (a gauge, 3 counters, the
   e2e latency histogram with vLLM's 22 buckets) would send, in WriteRequests of at most 2,000 points (Prometheus'
   ``max_samples_per_send``) from 4 concurrent senders (its shards);
2. **the agent path, the baseline**: the same fleetpilot samples that (1) derives — 8 GPU rows and 1 pool row per
   node and scrape, with the same values — pushed as the agent pushes them (``POST /api/v1/ingest``, gzipped JSON).

``samples_per_second`` is derived samples stored per second of (1), ``baseline`` the same for (2), ``ratio`` their
quotient; ``points_per_second`` the series points (1) took. Then **CPU at a 15 s scrape interval**: a fleet of
``--paced-series`` series sent in real time at 15 s for ``--paced-scrapes`` scrapes, the server's CPU time
(psutil, user + system) over that wall time, per 1,000 series (``cpu_percent_of_one_core_per_1000_series``).
``--quick`` sends fewer scrapes and paces 2 scrapes. Progress goes to stderr; the last line of stdout is one JSON
object.
"""

from __future__ import annotations

import argparse
import gzip
import json
import random
import sys
import tempfile
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import cramjam
import httpx
import psutil
from sqlalchemy import func, select

from bench.lib.progress import progress_line
from collector.database import make_engine
from collector.remote.prompb.remote_pb2 import WriteRequest
from collector.tables import samples
from fleetpilot.launch import ServerProcess

GPUS = 8
SCRAPE_SECONDS = 15.0
MAX_SAMPLES_PER_SEND = 2000  # Prometheus' queue_config default since 2.x
SENDERS = 4  # Prometheus' shards, sending at once
VLLM_BUCKETS = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0)
DCGM = ("DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_MEM_COPY_UTIL", "DCGM_FI_DEV_POWER_USAGE")
DCGM_TEMP = "DCGM_FI_DEV_GPU_TEMP"
POOL = "llama-8b"

Labels = tuple[tuple[str, str], ...]


progress = progress_line("remote_write")


@dataclass(frozen=True)
class Config:
    nodes: int
    scrapes: int
    paced_series: int
    paced_scrapes: int


class Fleet:
    """Each node's exporters, scrape after scrape: gauges that wander, counters and a histogram that grow."""

    def __init__(self, nodes: int, seed: int = 7, prefix: str = "node") -> None:
        self.nodes = [f"{prefix}-{i:04d}" for i in range(nodes)]
        self._random = random.Random(seed)
        self._counters: dict[Labels, float] = {}

    def scrape(self, node: str, ts: float) -> Iterator[tuple[Labels, float]]:
        """Every series of the node's dcgm-exporter and vLLM at ``ts``."""
        r = self._random
        for gpu in range(GPUS):
            base = (("Hostname", node), ("gpu", str(gpu)), ("job", "dcgm"), ("modelName", "NVIDIA H100 80GB HBM3"))
            values = (r.uniform(20, 95), r.uniform(20_000, 70_000), r.uniform(10, 80), r.uniform(300, 650))
            for name, value in zip(DCGM, values, strict=True):
                yield (("__name__", name), *base), round(value, 1)
            yield (("__name__", DCGM_TEMP), *base), float(r.randint(40, 80))
        vllm = (("engine", "0"), ("job", "vllm"), ("model_name", POOL), ("node", node))
        yield (("__name__", "vllm:num_requests_waiting"), *vllm), float(r.randint(0, 20))
        yield (("__name__", "vllm:kv_cache_usage_perc"), *vllm), round(r.uniform(0.1, 0.9), 3)
        finished = r.randint(100, 400)
        yield self._grow((("__name__", "vllm:generation_tokens_total"), *vllm), finished * r.uniform(100, 300))
        yield self._grow((("__name__", "vllm:request_success_total"), ("finished_reason", "stop"), *vllm), finished)
        histogram = "vllm:e2e_request_latency_seconds"
        seen = 0.0
        for bound in VLLM_BUCKETS:
            seen += finished * r.uniform(0.0, 0.12)
            yield self._grow((("__name__", f"{histogram}_bucket"), *vllm, ("le", repr(bound))), min(seen, finished))
        yield self._grow((("__name__", f"{histogram}_bucket"), *vllm, ("le", "+Inf")), finished)
        yield self._grow((("__name__", f"{histogram}_count"), *vllm), finished)
        yield self._grow((("__name__", f"{histogram}_sum"), *vllm), finished * 1.7)

    def _grow(self, labels: Labels, by: float) -> tuple[Labels, float]:
        self._counters[labels] = value = self._counters.get(labels, 0.0) + round(by)
        return labels, value


def write_requests(points: list[tuple[Labels, float]], ts: float) -> Iterator[bytes]:
    """Snappy-compressed WriteRequests of at most ``MAX_SAMPLES_PER_SEND`` points each."""
    for start in range(0, len(points), MAX_SAMPLES_PER_SEND):
        request = WriteRequest()
        for labels, value in points[start : start + MAX_SAMPLES_PER_SEND]:
            series = request.timeseries.add()
            for name, text in labels:
                series.labels.add(name=name, value=text)
            series.samples.add(value=value, timestamp=round(ts * 1000))
        yield bytes(cramjam.snappy.compress_raw(request.SerializeToString()))


def remote_bodies(fleet: Fleet, scrapes: int, start: float) -> tuple[list[list[bytes]], int]:
    """Per scrape, its WriteRequests (built before the clock starts), and the points they carry."""
    bodies, points = [], 0
    for k in range(scrapes):
        ts = start + k * SCRAPE_SECONDS
        scrape = [point for node in fleet.nodes for point in fleet.scrape(node, ts)]
        points += len(scrape)
        bodies.append(list(write_requests(scrape, ts)))
    return bodies, points


def send_all(url: str, token: str, bodies: list[list[bytes]]) -> float:
    """Send each scrape's requests from ``SENDERS`` threads, scrape after scrape; answer the wall seconds."""
    headers = {
        "Authorization": f"Bearer {token}",
        "Content-Encoding": "snappy",
        "Content-Type": "application/x-protobuf",
        "X-Prometheus-Remote-Write-Version": "0.1.0",
    }
    with httpx.Client(base_url=url, headers=headers, timeout=60.0) as client, ThreadPoolExecutor(SENDERS) as pool:

        def post(body: bytes) -> None:
            answer = client.post("/api/v1/write", content=body)
            if answer.status_code != 204:
                raise RuntimeError(f"remote write answered {answer.status_code}: {answer.text[:300]}")

        started = time.perf_counter()
        for scrape in bodies:
            list(pool.map(post, scrape))
        return time.perf_counter() - started


def stored_rows(database_url: str, *, agent: bool) -> list[dict[str, Any]]:
    """The samples the server stored from remote write (``seq`` < 0) or from agents, as the agent would push them."""
    engine = make_engine(database_url)
    query = select(samples).where(samples.c.seq >= 0 if agent else samples.c.seq < 0).order_by(samples.c.ts)
    with engine.connect() as conn:
        rows = [dict(r._mapping) for r in conn.execute(query)]
    engine.dispose()
    return rows


def count_rows(database_url: str, *, agent: bool) -> int:
    engine = make_engine(database_url)
    with engine.connect() as conn:
        found = conn.scalar(
            select(func.count()).select_from(samples).where(samples.c.seq >= 0 if agent else samples.c.seq < 0)
        )
    engine.dispose()
    return int(found or 0)


def agent_batches(rows: list[dict[str, Any]]) -> dict[str, list[bytes]]:
    """Per node, one gzipped ingest batch per scrape time holding the same samples, under fresh agent seqs."""
    by_node: dict[str, dict[float, list[dict[str, Any]]]] = {}
    for row in rows:
        by_node.setdefault(row["node_id"], {}).setdefault(row["ts"], []).append(row)
    batches: dict[str, list[bytes]] = {}
    for node, by_ts in by_node.items():
        seq = 0
        for ts in sorted(by_ts):
            wire = []
            for row in by_ts[ts]:
                seq += 1
                metrics = {k: v for k, v in row.items() if k not in _NOT_METRICS and v is not None}
                device = None if row["device"] < 0 else row["device"]
                wire.append({"seq": seq, "ts": ts, "device": device, "pool": row["pool"] or None, "metrics": metrics})
            body = json.dumps({"node_id": node, "samples": wire}).encode()
            batches.setdefault(node, []).append(gzip.compress(body, compresslevel=1))
    return batches


_NOT_METRICS = {"node_id", "seq", "ts", "device", "pool", "extra"}


def push_all(server: ServerProcess, batches: dict[str, list[bytes]]) -> float:
    """Push every node's batches, ``SENDERS`` nodes at a time; answer the wall seconds."""
    tokens = {node: server.create_agent_token(node) for node in batches}
    with httpx.Client(base_url=server.url, timeout=60.0) as client, ThreadPoolExecutor(SENDERS) as pool:

        def push(node: str) -> None:
            headers = {"Authorization": f"Bearer {tokens[node]}", "Content-Encoding": "gzip"}
            headers["Content-Type"] = "application/json"
            for body in batches[node]:
                answer = client.post("/api/v1/ingest", content=body, headers=headers)
                if answer.status_code != 200:
                    raise RuntimeError(f"ingest answered {answer.status_code}: {answer.text[:300]}")

        started = time.perf_counter()
        list(pool.map(push, sorted(batches)))
        return time.perf_counter() - started


def paced_cpu(server: ServerProcess, token: str, series: int, scrapes: int) -> dict[str, float]:
    """The server's CPU over ``scrapes`` real-time scrapes 15 s apart of a fleet of about ``series`` series."""
    per_node = sum(1 for _ in Fleet(1).scrape("x", 0.0))
    # nodes of their own: the baseline's agents now own node-0000…, and remote write never writes an agent's node
    fleet = Fleet(max(1, round(series / per_node)), seed=11, prefix="paced")
    assert server.process is not None
    process = psutil.Process(server.process.pid)
    start = time.time()
    cpu_before = _cpu(process)
    for k in range(scrapes):
        due = start + k * SCRAPE_SECONDS
        time.sleep(max(0.0, due - time.time()))
        ts = time.time()
        points = [p for node in fleet.nodes for p in fleet.scrape(node, ts)]
        send_all(server.url, token, [list(write_requests(points, ts))])
    time.sleep(max(0.0, start + scrapes * SCRAPE_SECONDS - time.time()))
    wall = time.time() - start
    cpu = _cpu(process) - cpu_before
    actual = len(fleet.nodes) * per_node
    return {
        "paced_series": actual,
        "paced_seconds": round(wall, 1),
        "cpu_percent_of_one_core_per_1000_series": round(100 * cpu / wall * 1000 / actual, 3),
    }


def _cpu(process: psutil.Process) -> float:
    times = process.cpu_times()
    children = sum(c.cpu_times().user + c.cpu_times().system for c in process.children(recursive=True))
    return float(times.user + times.system + children)


def run(config: Config) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="bench-remote-write-") as folder:
        url = f"sqlite:///{folder}/bench.db"
        start = time.time() - config.scrapes * SCRAPE_SECONDS - 60
        fleet = Fleet(config.nodes)
        bodies, points = remote_bodies(fleet, config.scrapes, start)
        progress(
            f"{config.nodes} nodes × {config.scrapes} scrapes: {points} points in {sum(map(len, bodies))} requests"
        )
        with ServerProcess(url, log_path=Path(folder) / "server.log") as server:
            token = server.create_token("remote_write")
            remote_seconds = send_all(server.url, token, bodies)
            derived = stored_rows(url, agent=False)
            progress(f"remote write: {len(derived)} samples derived in {remote_seconds:.1f} s")
            batches = agent_batches(derived)
            agent_seconds = push_all(server, batches)
            pushed = count_rows(url, agent=True)
            progress(f"agent path: {pushed} samples in {agent_seconds:.1f} s")
            progress(
                f"paced: ~{config.paced_series} series every {SCRAPE_SECONDS:g} s for {config.paced_scrapes} scrapes"
            )
            paced = paced_cpu(server, token, config.paced_series, config.paced_scrapes)
    remote_rate = len(derived) / remote_seconds
    agent_rate = pushed / agent_seconds
    return {
        "bench": "remote_write",
        "backend": "sqlite",
        "nodes": config.nodes,
        "scrapes": config.scrapes,
        "points": points,
        "points_per_second": round(points / remote_seconds),
        "samples": len(derived),
        "samples_per_second": round(remote_rate, 1),
        "baseline": round(agent_rate, 1),
        "baseline_samples": pushed,
        "ratio": round(remote_rate / agent_rate, 3),
        **paced,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.remote_write", description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="a smaller run, within 60 s")
    parser.add_argument("--nodes", type=int, default=None)
    parser.add_argument("--scrapes", type=int, default=None)
    parser.add_argument("--paced-series", type=int, default=None)
    parser.add_argument("--paced-scrapes", type=int, default=None)
    args = parser.parse_args(argv)
    quick = Config(nodes=20, scrapes=4, paced_series=1000, paced_scrapes=2)
    full = Config(nodes=100, scrapes=8, paced_series=10_000, paced_scrapes=6)
    base = quick if args.quick else full
    config = Config(
        nodes=args.nodes or base.nodes,
        scrapes=args.scrapes or base.scrapes,
        paced_series=args.paced_series or base.paced_series,
        paced_scrapes=args.paced_scrapes or base.paced_scrapes,
    )
    print(json.dumps(run(config)))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""An open-loop load of one small POST at a steady rate, sent from a process of its own by an asyncio HTTP/1.1 client
over kept-alive loopback connections: the load generator of a latency benchmark, lean enough that its own stalls
stay out of the latencies it reports.

A thread per request with httpx in the benchmark's own process (what ``bench.isolation`` used before) put the
client's jitter into the tail: a thread waking late, httpx's pool lock, the GIL held by whatever else the benchmark
did. Here one event loop sends each request at its scheduled time on an idle connection and reads its answer; each
request keeps three clock readings (``time.monotonic``, the same clock in every process), so a report can tell the
server's time (``sent`` → ``done``) from the client's own delay in sending (``scheduled`` → ``sent``).
"""

from __future__ import annotations

import asyncio
import multiprocessing
import time
from collections.abc import Mapping
from dataclasses import dataclass
from multiprocessing.connection import Connection
from urllib.parse import urlsplit

from inference_agent.heap import settle_heap

CONNECT_TIMEOUT_S = 2.0
ANSWER_TIMEOUT_S = 30.0


@dataclass(frozen=True)
class Shot:
    """One request's fate: when it was due, when its last byte went out, when its answer's last byte came in, and
    its status (0: no answer; ``error`` says why)."""

    scheduled: float
    sent: float
    done: float
    status: int
    error: str = ""

    @property
    def answer_s(self) -> float:
        """From its last byte sent to its answer's last byte: the server's time, the client's delay in sending not
        counted (``send_lag_s``)."""
        return self.done - self.sent

    @property
    def send_lag_s(self) -> float:
        return self.sent - self.scheduled


@dataclass(frozen=True)
class LoadPlan:
    """``count`` POSTs of ``body`` to ``url`` at ``rate_rps``, the first at ``start`` (monotonic seconds)."""

    url: str
    body: bytes
    headers: Mapping[str, str]
    rate_rps: float
    count: int
    start: float


def request_bytes(plan: LoadPlan) -> bytes:
    parts = urlsplit(plan.url)
    head = [f"POST {parts.path or '/'} HTTP/1.1", f"Host: {parts.netloc}", "Content-Type: application/json"]
    head += [f"{name}: {value}" for name, value in plan.headers.items()]
    head.append(f"Content-Length: {len(plan.body)}")
    return ("\r\n".join(head) + "\r\n\r\n").encode() + plan.body


class _Connections:
    """Idle kept-alive connections to one host; a new one is opened when none is idle."""

    def __init__(self, host: str, port: int) -> None:
        self.host, self.port = host, port
        self._idle: list[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = []

    async def take(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        if self._idle:
            return self._idle.pop()
        return await asyncio.wait_for(asyncio.open_connection(self.host, self.port), CONNECT_TIMEOUT_S)

    def give_back(self, pair: tuple[asyncio.StreamReader, asyncio.StreamWriter], reusable: bool) -> None:
        if reusable:
            self._idle.append(pair)
        else:
            pair[1].close()

    def close(self) -> None:
        for _, writer in self._idle:
            writer.close()


async def _answer(reader: asyncio.StreamReader) -> tuple[int, bool]:
    """Read one answer with a Content-Length; its status, and whether the connection stays open."""
    head = await reader.readuntil(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split(" ", 2)[1])
    fields = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:] if line)}
    await reader.readexactly(int(fields.get("content-length", "0")))
    return status, fields.get("connection", "").lower() != "close"


async def _one(connections: _Connections, payload: bytes, scheduled: float) -> Shot:
    sent = time.monotonic()
    try:
        pair = await connections.take()
        pair[1].write(payload)
        await pair[1].drain()
        sent = time.monotonic()
        status, keep = await asyncio.wait_for(_answer(pair[0]), ANSWER_TIMEOUT_S)
        done = time.monotonic()
        connections.give_back(pair, keep)
        return Shot(scheduled, sent, done, status)
    except (TimeoutError, OSError, asyncio.IncompleteReadError, ValueError) as exc:
        return Shot(scheduled, sent, time.monotonic(), 0, type(exc).__name__)


async def _warm(connections: _Connections, count: int) -> None:
    """Open ``count`` connections ahead, so that no measured request pays a connect."""
    pairs = [await connections.take() for _ in range(count)]
    for pair in pairs:
        connections.give_back(pair, True)


async def run_plan(plan: LoadPlan, warm_connections: int = 8) -> list[Shot]:
    """Send the plan's requests, each at its time whatever the answers before it; every request's Shot."""
    parts = urlsplit(plan.url)
    connections = _Connections(parts.hostname or "127.0.0.1", parts.port or 80)
    payload = request_bytes(plan)
    await _warm(connections, warm_connections)
    tasks = []
    for index in range(plan.count):
        scheduled = plan.start + index / plan.rate_rps
        await asyncio.sleep(max(0.0, scheduled - time.monotonic()))
        tasks.append(asyncio.create_task(_one(connections, payload, scheduled)))
    shots = list(await asyncio.gather(*tasks))
    connections.close()
    return shots


def _serve_plans(pipe: Connection) -> None:
    """The load process: each LoadPlan received is run and its shots sent back; None ends it. The heap it forked
    with (the benchmark's imports) is frozen first, so that a full collection here stalls no send."""
    settle_heap()
    while (plan := pipe.recv()) is not None:
        pipe.send(asyncio.run(run_plan(plan)))


class OpenLoopClient:
    """A process that runs load plans on request: ``with OpenLoopClient() as client: client.run(plan)``."""

    def __init__(self) -> None:
        context = multiprocessing.get_context("fork")
        self._pipe, child = context.Pipe()
        self._process = context.Process(target=_serve_plans, args=(child,), name="open-loop-client", daemon=True)

    def __enter__(self) -> OpenLoopClient:
        self._process.start()
        return self

    def run(self, plan: LoadPlan) -> list[Shot]:
        self._pipe.send(plan)
        shots: list[Shot] = self._pipe.recv()
        return shots

    def __exit__(self, *_exc: object) -> None:
        self._pipe.send(None)
        self._process.join(timeout=10)
        if self._process.is_alive():
            self._process.kill()
            self._process.join()

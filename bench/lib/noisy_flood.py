"""The noisy tenant's flood: closed-loop clients streaming one long generation after another at a pool of an agent's
serving API, in a process of their own, counting the tokens they receive and the requests admitted and refused. The
isolation benchmark floods the fast tenant's node with it; the MPS fleet part saturates each pool with it."""

from __future__ import annotations

import multiprocessing
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from multiprocessing.synchronize import Event

import httpx

NOISY_PROMPT = "Tell me a long story about a fleet of GPUs. " * 4


@dataclass(frozen=True)
class Flood:
    """How hard the noisy tenant pushes: ``clients`` closed-loop streams of ``max_tokens`` each."""

    clients: int
    max_tokens: int


class NoisyCounters:
    """Counts shared with the flood's process: tokens received, requests admitted, requests refused (429, other)."""

    FIELDS = ("tokens", "admitted", "refused_429", "refused_other")

    def __init__(self) -> None:
        self._values = multiprocessing.get_context("fork").Array("q", len(self.FIELDS))

    def add(self, name: str) -> None:
        with self._values.get_lock():
            self._values[self.FIELDS.index(name)] += 1

    def read(self) -> dict[str, int]:
        with self._values.get_lock():
            return dict(zip(self.FIELDS, self._values[:], strict=True))


def noisy_client(
    client: httpx.Client, serve_url: str, pool: str, max_tokens: int, stop: Event, n: NoisyCounters
) -> None:
    """Closed loop: one streamed long generation after another until ``stop``; counts every token as it arrives."""
    body = {"model": pool, "prompt": NOISY_PROMPT, "max_tokens": max_tokens, "stream": True}
    while not stop.is_set():
        try:
            with client.stream("POST", f"{serve_url}/v1/completions", json=body) as r:
                if r.status_code != 200:
                    r.read()
                    n.add("refused_429" if r.status_code == 429 else "refused_other")
                    stop.wait(float(r.headers.get("retry-after", "1")))
                    continue
                n.add("admitted")
                for line in r.iter_lines():
                    if stop.is_set():
                        break  # leaving the block closes the stream, which aborts the generation
                    if line.startswith("data: {"):
                        n.add("tokens")
        except httpx.HTTPError:
            n.add("refused_other")
            stop.wait(0.5)


def flood_process(
    serve_url: str, pool: str, flood: Flood, key: Mapping[str, str], stop: Event, counters: NoisyCounters
) -> None:
    """The noisy tenant's clients (sending its ``key`` headers), in their own process so that parsing their streams
    does not hold this process's GIL while it times the fast tenant."""
    timeout, limits = httpx.Timeout(120.0, connect=2.0), httpx.Limits(max_connections=256)
    client = httpx.Client(timeout=timeout, limits=limits, headers=dict(key))
    arguments = (client, serve_url, pool, flood.max_tokens, stop, counters)
    threads = [threading.Thread(target=noisy_client, args=arguments) for _ in range(flood.clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    client.close()


@contextmanager
def noisy_flood(serve_url: str, flood: Flood, key: Mapping[str, str], pool: str = "chat") -> Iterator[NoisyCounters]:
    """``flood.clients`` closed-loop clients of the noisy tenant on ``pool``, stopped (their streams closed)
    on exit."""
    context = multiprocessing.get_context("fork")
    counters, stop = NoisyCounters(), context.Event()
    arguments = (serve_url, pool, flood, key, stop, counters)
    process = context.Process(target=flood_process, args=arguments, name=f"flood-{pool}")
    process.start()
    try:
        yield counters
    finally:
        stop.set()
        process.join(timeout=30)
        if process.is_alive():
            process.kill()
            process.join()

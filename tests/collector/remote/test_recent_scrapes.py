"""The previous scrapes a writer holds in memory (``RecentScrapes``): trusted only where the store counts the same
points, so a restarted writer and two workers sharing one scrape derive what one writer given everything would."""

from __future__ import annotations

from collections.abc import Sequence

import pytest
from sqlalchemy import Engine, select

from collector.remote.mapping import load_mapping
from collector.remote.node_admission import Sender
from collector.remote.receiver import RemoteWriter
from collector.remote.recent_scrapes import RecentScrapes
from collector.remote.series import RemoteSeries
from collector.tables import samples
from tests.support.clock import FakeClock

T0 = FakeClock().now - 60
VLLM = {"model_name": "llama-8b", "engine": "0", "node": "gpu-1", "job": "vllm"}
BOUNDS = ("0.5", "1.0", "2.5", "+Inf")


def scrape(counts: Sequence[float], tokens: float, ts: float) -> list[RemoteSeries]:
    """vLLM's e2e latency histogram (``counts`` per bound) and its generated tokens at ``ts``."""
    name = "vllm:e2e_request_latency_seconds"
    buckets = [
        RemoteSeries({"__name__": f"{name}_bucket", "le": le, **VLLM}, ((ts, c),))
        for le, c in zip(BOUNDS, counts, strict=True)
    ]
    return [
        *buckets,
        RemoteSeries({"__name__": f"{name}_count", **VLLM}, ((ts, counts[-1]),)),
        RemoteSeries({"__name__": "vllm:generation_tokens_total", **VLLM}, ((ts, tokens),)),
    ]


def write(writer: RemoteWriter, series: list[RemoteSeries]) -> None:
    writer.write(series, received_at=T0 + 60, kind="remote_write", sender=Sender("token"))


def derived(engine: Engine) -> list[tuple[object, ...]]:
    c = samples.c
    query = select(c.ts, c.token_throughput_per_second, c.request_latency_p99_seconds).order_by(c.ts)
    with engine.connect() as conn:
        return [tuple(row) for row in conn.execute(query)]


FIRST = scrape([0, 0, 0, 0], 1000.0, T0)
SECOND = scrape([36, 42, 42, 42], 7000.0, T0 + 15)
WHOLE = [(T0 + 15, pytest.approx(400.0), pytest.approx(0.965))]  # the first scrape: counters, no rate yet


def test_a_restarted_writer_reads_the_previous_scrape_back(engine: Engine) -> None:
    write(RemoteWriter(engine, load_mapping()), FIRST)
    write(RemoteWriter(engine, load_mapping()), SECOND)  # a new process: nothing of the first scrape in memory
    assert derived(engine) == WHOLE


def test_two_workers_sharing_scrapes_converge(engine: Engine) -> None:
    """Each worker holds part of a scrape another one completed: what it holds counts short of the store and is
    read back, instead of a p99 from half the buckets."""
    one, two = RemoteWriter(engine, load_mapping()), RemoteWriter(engine, load_mapping())
    write(one, FIRST)
    write(two, SECOND[:3])
    write(one, SECOND[3:])  # holds the whole first scrape, but only its own half of the second
    assert derived(engine) == WHOLE
    write(two, SECOND[3:])  # a resend to the other worker: nothing new, nothing derived again
    assert derived(engine) == WHOLE


def test_recent_scrapes_trust_a_scrape_only_at_the_stored_count() -> None:
    recent = RecentScrapes(keep_seconds=30.0, max_points=10)
    recent.add(7, 0.0, [(1, 1.0), (2, 2.0)])
    recent.add(7, 15.0, [(1, 3.0)])
    assert recent.missing(7, {0.0: 2, 15.0: 2}, [0.0, 15.0]) == [15.0]  # another worker stored one more
    recent.put(7, 15.0, [(1, 3.0), (2, 4.0)])
    assert recent.missing(7, {0.0: 2, 15.0: 2}, [0.0, 15.0]) == []
    assert recent.missing(8, {0.0: 1}, [0.0]) == [0.0]  # a group never seen (a restart)
    recent.add(7, 60.0, [(1, 5.0)])
    recent.trim([7])  # 0.0 is more than 30 s before 60.0
    assert recent.missing(7, {0.0: 2, 15.0: 2, 60.0: 1}, [0.0, 15.0, 60.0]) == [0.0, 15.0]
    recent.add(7, 75.0, [(n, 0.0) for n in range(10)])
    recent.trim([7])  # past max_points: all of it forgotten
    assert recent.missing(7, {60.0: 1}, [60.0]) == [60.0]

"""The agent tells the control plane why metrics are absent: the GPU probe that could not start and what each pool's
engine lacks, in its report, with the reasons it logs; the server's ingest takes that report."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from importlib.resources import files
from pathlib import Path

from inference_agent.absences import metric_absences, reason_text
from inference_agent.daemon import Agent, Probes
from inference_agent.fake_collector import FakeCollector
from inference_agent.probes.engines import EngineScrapeProbe
from inference_agent.probes.exposition_fetch import ReplayFetch
from tests.inference_agent.test_daemon import node_settings, push
from tests.support.clock import FakeClock
from wire.control import MAX_ABSENCE_REASON_CHARS, MetricAbsences
from wire.samples import parse_batch


@dataclass
class Engine:
    """What ``metric_absences`` reads of an engine probe (``EngineAbsences``)."""

    pool: str
    url: str
    kind: str = "vllm"
    lacking: dict[str, str] = field(default_factory=dict)

    def absent(self) -> dict[str, str]:
        return dict(self.lacking)


def test_a_pool_lacks_only_what_every_engine_of_it_lacks_with_the_first_engines_reason() -> None:
    tgi = Engine("chat", "http://a/metrics", "tgi", {"kv_cache_utilization_ratio": "tgi exposes no KV-cache metric"})
    vllm = Engine("chat", "http://b/metrics", lacking={"kv_cache_utilization_ratio": "vllm:x is not exposed"})
    llama = Engine("code", "http://c/metrics", "llamacpp", {"request_rate_per_second": "llamacpp counts tokens"})
    found = metric_absences(None, [vllm, llama, tgi, Engine("chat", "http://d/metrics")])
    assert found == MetricAbsences(pools={"code": {"request_rate_per_second": "llamacpp counts tokens"}})
    found = metric_absences("NVML Shared Library Not Found", [vllm, tgi])
    assert found.gpu == "NVML Shared Library Not Found"
    assert found.pools == {"chat": {"kv_cache_utilization_ratio": "tgi exposes no KV-cache metric"}}


def test_a_reason_is_never_empty_and_never_longer_than_the_wire_takes() -> None:
    assert reason_text("  ") == "no reason given"
    long = reason_text("nvmlInit failed: " + "x" * 1000)
    assert len(long) == MAX_ABSENCE_REASON_CHARS and long.endswith("…")


def test_the_report_says_why_and_the_collector_takes_it(tmp_path: Path) -> None:
    tgi_text = files("inference_agent.probes").joinpath("fixtures", "engines", "tgi_scrape_1.prom").read_text()
    probe = EngineScrapeProbe("tgi", "http://tgi:80/metrics", "chat", fetch=ReplayFetch([tgi_text]), clock=FakeClock())
    probe.read()
    collector = FakeCollector()
    probes = Probes(None, "NVML Shared Library Not Found", engines=[probe])
    agent = Agent(node_settings(tmp_path), probes, transport=collector.transport)
    try:
        push(agent, collector, None)
    finally:
        agent.close()
    body = collector.requests[-1]
    absent = body["report"]["absent"]
    assert absent["gpu"] == "NVML Shared Library Not Found"
    assert absent["pools"]["chat"]["kv_cache_utilization_ratio"] == "tgi exposes no KV-cache metric"
    assert absent["pools"]["chat"]["request_rate_per_second"] == "needs a second scrape"
    body["samples"] = []  # push() spools a made-up sample; the report is what is checked here
    now = body["report"]["ts"]
    batch = parse_batch(json.dumps(body).encode(), now=now, max_samples=100, max_future_seconds=300, max_replicas=64)
    assert batch.report is not None and batch.report.absent == MetricAbsences.model_validate(absent)

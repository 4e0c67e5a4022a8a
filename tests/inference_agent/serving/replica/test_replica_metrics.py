"""The replica's vLLM-named exposition: cumulative buckets, families per kind, and what a scrape reads back."""

from __future__ import annotations

import pytest
from prometheus_client.parser import text_string_to_metric_families

from inference_agent.serving.replica.app import ReplicaApp
from inference_agent.serving.replica.fake_engine import FakeClassifier, FakeTextEngine
from inference_agent.serving.replica.metrics import CumulativeHistogram
from inference_agent.torch_runtime.api import CompletionRequest, FinishReason


def test_buckets_are_cumulative_and_inclusive() -> None:
    histogram = CumulativeHistogram((0.3, 0.5, 1.0))
    for seconds in (0.3, 0.4, 0.9, 7.0):
        histogram.observe(seconds)
    buckets, total = histogram.buckets()
    assert buckets == [("0.3", 1.0), ("0.5", 2.0), ("1.0", 3.0), ("+Inf", 4.0)]
    assert total == pytest.approx(8.6)


def families(app: ReplicaApp) -> dict[str, dict[tuple[tuple[str, str], ...], float]]:
    """Family → (sorted labels → value) of one scrape, as a Prometheus parser reads it."""
    parsed: dict[str, dict[tuple[tuple[str, str], ...], float]] = {}
    for family in text_string_to_metric_families(app.metrics.exposition().decode()):
        for sample in family.samples:
            parsed.setdefault(sample.name, {})[tuple(sorted(sample.labels.items()))] = sample.value
    return parsed


def test_a_text_replica_exposes_vllms_families_under_its_served_name() -> None:
    app = ReplicaApp("p", "text", model_name="org/m")
    engine = FakeTextEngine(token_delay_s=0.0)
    app.ready(text_engine=engine)
    for _ in engine.submit(CompletionRequest("r", "abc", 3)):
        pass
    app.admit("r1", "default")
    app.done("r1", 0.4, FinishReason.LENGTH)
    app.admit("r2", "default")
    app.done("r2", 0.1, FinishReason.ABORT)
    app.admit("r3", "default")
    app.done("r3", 0.1, None)  # failed: counted by the ledger, not as a finished request
    scraped = families(app)
    labels = (("engine", "0"), ("model_name", "org/m"))
    assert scraped["vllm:generation_tokens_total"] == {labels: 3.0}
    assert scraped["vllm:prompt_tokens_total"] == {labels: 4.0}  # 3 bytes + BOS
    assert scraped["vllm:num_requests_waiting"] == {labels: 0.0}
    assert scraped["vllm:kv_cache_usage_perc"] == {labels: 0.0}
    assert scraped["vllm:request_success_total"] == {
        (*labels[:1], ("finished_reason", reason), *labels[1:]): count
        for reason, count in (("stop", 0.0), ("length", 1.0), ("abort", 1.0))
    }
    assert scraped["vllm:e2e_request_latency_seconds_count"] == {labels: 2.0}
    assert scraped["vllm:e2e_request_latency_seconds_bucket"][(*labels[:1], ("le", "0.3"), *labels[1:])] == 1.0
    assert "vllm:time_to_first_token_seconds_count" in scraped
    assert app.ledger.completed == 1 and app.ledger.failed == 2


def test_a_classify_replica_has_no_kv_cache_tokens_or_first_token() -> None:
    app = ReplicaApp("img", "classify")
    app.ready(classifier=FakeClassifier())
    app.admit("c1", "default")
    app.done("c1", 0.01, FinishReason.STOP)
    scraped = families(app)
    assert {"vllm:num_requests_running", "vllm:e2e_request_latency_seconds_count"} <= set(scraped)
    for absent in (
        "vllm:kv_cache_usage_perc",
        "vllm:generation_tokens_total",
        "vllm:time_to_first_token_seconds_count",
    ):
        assert absent not in scraped

"""Exposition arithmetic: PromQL's histogram_quantile, counter increases with restarts, sums over label sets."""

from __future__ import annotations

import math

import pytest

from wire.scrape.arithmetic import (
    Buckets,
    Histogram,
    LabelSet,
    Series,
    UnparsableExposition,
    bucket_increase,
    counter_increase,
    gauge,
    histogram,
    histogram_quantile,
    mean,
    parse_families,
    samples,
    summary_quantile,
)

INF = math.inf
A: LabelSet = frozenset({("model", "a")})
B: LabelSet = frozenset({("model", "b")})


@pytest.mark.parametrize(
    ("quantile", "buckets", "expected"),
    [
        # vLLM fixture's e2e increase: rank 41.58 in (5, 10] holding 6, 5.58 of them → 5 + 5 × 5.58 / 6
        (0.99, {2.5: 24, 5.0: 36, 10.0: 42, 15.0: 42, INF: 42}, 9.65),
        # median: rank 5 in (1, 2] holding 4, 3 of them → 1 + 1 × 3 / 4
        (0.5, {1.0: 2, 2.0: 6, 4.0: 10, INF: 10}, 1.75),
        # first bucket: its lower edge is 0 → 0.5 × 9.9 / 10
        (0.99, {0.5: 10, 1.0: 10, INF: 10}, 0.495),
        # rank 99 lands in +Inf: the highest finite bound, as PromQL
        (0.99, {1.0: 90, 2.0: 98, INF: 100}, 2.0),
        # a count below its predecessor (scraped mid-update) is carried up: 5, 5, 10 → +Inf again
        (0.99, {1.0: 5, 2.0: 4, INF: 10}, 2.0),
        # a first bucket at or below zero answers its bound
        (0.5, {-1.0: 4, 1.0: 6, INF: 6}, -1.0),
        # p99 of a single observation: rank 0.99 in (0.8, 1.0] → 0.8 + 0.2 × 0.99
        (0.99, {0.8: 0, 1.0: 1, INF: 1}, 0.998),
    ],
)
def test_histogram_quantile_interpolates_like_promql(quantile: float, buckets: Buckets, expected: float) -> None:
    assert histogram_quantile(quantile, buckets) == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize(
    "buckets",
    [
        pytest.param({0.5: 0, 1.0: 0, INF: 0}, id="no observations in the interval"),
        pytest.param({0.5: 3, 1.0: 4}, id="no +Inf bucket"),
        pytest.param({INF: 4}, id="only +Inf"),
        pytest.param({}, id="empty"),
    ],
)
def test_histogram_quantile_is_absent_without_a_measurement(buckets: Buckets) -> None:
    assert histogram_quantile(0.99, buckets) is None


def test_histogram_quantile_refuses_a_quantile_outside_0_1() -> None:
    with pytest.raises(ValueError, match="outside"):
        histogram_quantile(1.5, {1.0: 1, INF: 1})


@pytest.mark.parametrize(
    ("before", "after", "expected"),
    [
        ({A: 10.0}, {A: 25.0}, 15.0),
        # restarted: 100 → 7 counts the 7 since the restart
        ({A: 100.0}, {A: 7.0}, 7.0),
        # one of two series restarted: 3 + (60 − 50); a sum-then-diff would say 63 − 150 = −87
        ({A: 100.0, B: 50.0}, {A: 3.0, B: 60.0}, 13.0),
        # a label set new since the last scrape started from 0
        ({A: 10.0}, {A: 10.0, B: 4.0}, 4.0),
        # a label set gone (a model unloaded) adds nothing
        ({A: 10.0, B: 5.0}, {A: 12.0}, 2.0),
        # the family appeared between the scrapes
        (None, {A: 4.0}, 4.0),
        ({A: 10.0}, {A: 10.0}, 0.0),
    ],
)
def test_counter_increase_per_series(before: Series | None, after: Series, expected: float) -> None:
    assert counter_increase(before, after) == expected


@pytest.mark.parametrize(
    ("before", "after", "expected"),
    [
        pytest.param(
            {A: {1.0: 4, INF: 5}}, {A: {1.0: 6, INF: 9}}, {1.0: 2, INF: 4}, id="one series: differences per bound"
        ),
        pytest.param(
            {A: {1.0: 4, INF: 5}, B: {1.0: 1, INF: 1}},
            {A: {1.0: 6, INF: 9}, B: {1.0: 3, INF: 4}},
            {1.0: 4, INF: 7},
            id="two series: summed per bound",
        ),
        pytest.param(
            {A: {1.0: 400, INF: 500}, B: {1.0: 1, INF: 1}},
            {A: {1.0: 2, INF: 3}, B: {1.0: 3, INF: 4}},
            {1.0: 4, INF: 6},
            id="a restarted series counts its new buckets whole",
        ),
        pytest.param(None, {A: {1.0: 2, INF: 3}}, {1.0: 2, INF: 3}, id="the family appeared in between"),
    ],
)
def test_bucket_increase(before: Histogram | None, after: Histogram, expected: Buckets) -> None:
    assert bucket_increase(before, after) == expected


TWO_MODELS = """\
# HELP nv_inference_pending_request_count Instantaneous number of pending requests awaiting execution per-model.
# TYPE nv_inference_pending_request_count gauge
nv_inference_pending_request_count{model="a",version="1"} 2
nv_inference_pending_request_count{model="b",version="1"} 5
# TYPE nv_inference_request_success counter
nv_inference_request_success{model="a",version="1"} 40
nv_inference_request_success{model="b",version="1"} 2
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.25
vllm:kv_cache_usage_perc{engine="1",model_name="m"} 0.75
# TYPE s_us summary
s_us{model="a",version="1",quantile="0.99"} 120
s_us{model="b",version="1",quantile="0.99"} NaN
s_us{model="b",version="1",quantile="0.5"} 900
s_us_count{model="a",version="1"} 3
# TYPE h histogram
h_bucket{model="a",le="1.0"} 1
h_bucket{model="a",le="+Inf"} 2
h_count{model="a"} 2
h_sum{model="a"} 2.5
"""


def test_sums_means_and_maxima_over_label_sets() -> None:
    families = parse_families(TWO_MODELS)
    assert gauge(families, "nv_inference_pending_request_count") == 7.0
    assert gauge(families, "vllm:kv_cache_usage_perc", mean) == 0.5
    assert gauge(families, "tgi_queue_size") is None
    # a counter without _total on the wire is read as _total, as the parser renames it
    assert samples(families, "nv_inference_request_success", "_total") == {
        frozenset({("model", "a"), ("version", "1")}): 40.0,
        frozenset({("model", "b"), ("version", "1")}): 2.0,
    }
    # the NaN quantile (an empty summary window) and the 0.5 quantile are not a p99
    assert summary_quantile(families, "s_us", 0.99) == 120.0
    assert summary_quantile(families, "s_us", 0.9) is None
    assert histogram(families, "h") == {A: {1.0: 1.0, INF: 2.0}}
    assert samples(families, "h", "_sum") == {A: 2.5}


def test_parse_keeps_only_the_families_asked_for() -> None:
    families = parse_families(TWO_MODELS, frozenset({"h", "nv_inference_request_success"}))
    assert families == {k: v for k, v in parse_families(TWO_MODELS).items() if k in families}
    assert sorted(families) == ["h", "nv_inference_request_success"]


@pytest.mark.parametrize(
    "text",
    [
        "<html><body>502 Bad Gateway</body></html>",
        'vllm:num_requests_waiting{engine="0" 3\n',
        "tgi_queue_size three\n",
    ],
)
def test_unparsable_text_is_one_exception(text: str) -> None:
    with pytest.raises(UnparsableExposition):
        parse_families(text)

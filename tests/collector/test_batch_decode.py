"""The one-pass decoders agree with the wire model: what ``wire.samples.parse_batch`` takes they take with the same
columns, what it refuses they refuse naming the same sample and field, and the compact encoding round-trips."""

from __future__ import annotations

import contextlib
import json
import math
from typing import Any, cast

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from collector.batch import NO_DEVICE, SampleBatch
from collector.batch_decode import decode_columns, decode_json
from collector.batch_rules import checked
from wire import columnar
from wire.errors import InvalidBatch
from wire.samples import SampleJson, parse_batch

NOW = 1_764_424_800.0
LIMITS: dict[str, Any] = {"now": NOW, "max_future_seconds": 300.0, "max_replicas": 256}
GPU: dict[str, Any] = {
    "seq": 1,
    "ts": NOW,
    "device": 0,
    "metrics": {"gpu_utilization_ratio": 0.5, "gpu_power_watts": 300},
}
POOL: dict[str, Any] = {
    "seq": 2,
    "ts": NOW,
    "pool": "chat",
    "metrics": {"queue_depth_requests": 3},
    "extra": {"pod": "a/b"},
}


def encode(node_id: str, samples: list[dict[str, Any]], **envelope: Any) -> bytes:
    return columnar.encode_columns(node_id, cast(list[SampleJson], samples), **envelope)


def body(*samples: Any, **envelope: Any) -> bytes:
    return json.dumps({"node_id": "node-a", "samples": list(samples), **envelope}).encode()


def reference(raw: bytes) -> SampleBatch | list[tuple[int | None, str]]:
    try:
        return SampleBatch.from_wire(parse_batch(raw, max_samples=100, **LIMITS))
    except InvalidBatch as exc:
        return [(p.sample, p.field) for p in exc.problems]


def fast(raw: bytes) -> SampleBatch | list[tuple[int | None, str]]:
    try:
        return checked(decode_json(raw, max_samples=100, **LIMITS), **LIMITS)
    except InvalidBatch as exc:
        return [(p.sample, p.field) for p in exc.problems]


def same_columns(a: SampleBatch, b: SampleBatch) -> bool:
    return (
        a.node_id == b.node_id
        and all(np.array_equal(getattr(a, c), getattr(b, c)) for c in ("seq", "ts", "device", "pool"))
        and np.array_equal(a.values, b.values, equal_nan=True)
        and (a.pools, a.extras, a.report, a.inventory) == (b.pools, b.extras, b.report, b.inventory)
    )


CASES: list[tuple[str, bytes]] = [
    ("a GPU and a pool sample", body(GPU, POOL)),
    ("with report and inventory", body(GPU, report={"ts": NOW, "pools": {"chat": {"ready": 2}}}, inventory={})),
    ("legacy replica extras", body({**POOL, "extra": {"replicas_ready": 3}})),
    ("no samples", body()),
    ("a number as a string", body({**GPU, "ts": str(NOW)})),
    ("an integral float seq", body({**GPU, "seq": 5.0})),
    ("a boolean device", body({**GPU, "device": True})),
    ("a pool name ending in a newline", body({**POOL, "pool": "chat\n"})),
    ("a node id ending in a newline", json.dumps({"node_id": "node-a\n", "samples": []}).encode()),
    ("an unknown metric", body({**GPU, "metrics": {"gpu_fan_ratio": 0.1}})),
    ("a ratio above 1", body({**GPU, "metrics": {"gpu_utilization_ratio": 1.01}})),
    ("a value past 2^63", body({**GPU, "metrics": {"gpu_power_watts": 2.0**64}})),
    ("an integer past any float", body({**GPU, "metrics": {"gpu_power_watts": 10**400}})),
    ("NaN", body(GPU).replace(b"300", b"NaN")),
    ("seq from 2^63", body({**GPU, "seq": 2**63})),
    ("a GPU metric without device", body({**GPU, "device": None})),
    ("a pool metric without pool", body({**POOL, "pool": None})),
    ("ts too far ahead", body({**GPU, "ts": NOW + 301}, report={"ts": NOW + 400, "pools": {}})),
    ("a report past the replica bound", body(GPU, report={"ts": NOW, "pools": {"chat": {"ready": 300}}})),
    ("a bad report field", body(GPU, report={"ts": NOW, "pools": {"chat": {"ready": -1}}})),
    ("an extra integer past any float", body({**POOL, "extra": {"big": 10**400}})),
    ("legacy replicas past the bound", body({**POOL, "extra": {"replicas_ready": 300}})),
    ("an extra nested 150 deep", body({**POOL, "extra": {"x": json.loads("[" * 150 + "]" * 150)}})),
    ("an extra nested 250 deep", body(POOL).replace(b'"pod": "a/b"', b'"x": ' + b"[" * 250 + b"]" * 250)),
    ("duplicate keys", b'{"node_id": "x", "node_id": "node-a", "samples": []}'),
    ("not an object", b"[]"),
]


@pytest.mark.parametrize(("case", "raw"), CASES, ids=[c[0] for c in CASES])
def test_the_json_decoder_takes_and_refuses_what_the_wire_model_does(case: str, raw: bytes) -> None:
    expected, got = reference(raw), fast(raw)
    if isinstance(expected, SampleBatch):
        assert isinstance(got, SampleBatch) and same_columns(got, expected)
    else:
        assert got == expected


def test_an_absent_metric_is_nan_and_no_device_or_pool_is_the_marker() -> None:
    batch = fast(body(GPU, POOL))
    assert isinstance(batch, SampleBatch)
    assert batch.device.tolist() == [0, NO_DEVICE] and [batch.pool_of(0), batch.pool_of(1)] == [None, "chat"]
    assert batch.values[0, 0] == 0.5 and math.isnan(batch.values[0, 5]) and batch.extras == {1: {"pod": "a/b"}}


def test_a_compact_body_decodes_to_the_batch_its_json_does() -> None:
    samples = [GPU, POOL, {**GPU, "seq": 3, "device": 7, "metrics": {}}, {**POOL, "seq": 4, "pool": "other"}]
    report = {"ts": NOW, "pools": {"chat": {"ready": 2}}}
    compact = encode("node-a", samples, report=report)
    as_json = fast(body(*samples, report=report))
    assert isinstance(as_json, SampleBatch)
    assert same_columns(checked(decode_columns(compact, max_samples=100), **LIMITS), as_json)
    assert columnar.decode_to_json(compact) == json.loads(body(*samples, report=report)) | {
        "samples": [
            {"device": None, "pool": None, "extra": {}, **s}
            for s in samples  # the defaults made explicit
        ]
    }


@pytest.mark.parametrize(
    ("value", "field"),
    [
        (math.nan, "metrics.gpu_utilization_ratio"),
        (1.5, "metrics.gpu_utilization_ratio"),
        (-1.0, "metrics.gpu_utilization_ratio"),
    ],
)
def test_a_compact_value_out_of_range_is_named(value: float, field: str) -> None:
    compact = encode("node-a", [GPU, {**GPU, "seq": 2, "metrics": {"gpu_utilization_ratio": value}}])
    with pytest.raises(InvalidBatch) as refused:
        decode_columns(compact, max_samples=100)
    assert [(p.sample, p.field) for p in refused.value.problems] == [(1, field)]


def test_compact_columns_that_break_the_json_forms_types_are_named() -> None:
    compact = bytearray(encode("node-a", [GPU, {**POOL, "device": None}]))
    head = 8 + int.from_bytes(compact[4:8], "little")
    compact[head : head + 8] = (-5).to_bytes(8, "little", signed=True)  # seq of sample 0
    compact[head + 32 : head + 34] = (2000).to_bytes(2, "little", signed=True)  # device of sample 0
    compact[head + 38 : head + 40] = (9).to_bytes(2, "little", signed=True)  # pool of sample 1: no such index
    with pytest.raises(InvalidBatch) as refused:
        decode_columns(bytes(compact), max_samples=100)
    assert [(p.sample, p.field) for p in refused.value.problems] == [(0, "seq"), (0, "device"), (1, "pool")]


def test_a_bit_past_the_catalog_is_an_unknown_metric() -> None:
    compact = bytearray(encode("node-a", [GPU]))
    head = 8 + int.from_bytes(compact[4:8], "little")
    compact[head + 20 : head + 22] = (1 << 13).to_bytes(2, "little")
    with pytest.raises(InvalidBatch) as refused:
        decode_columns(bytes(compact), max_samples=100)
    assert (refused.value.problems[0].sample, refused.value.problems[0].field) == (0, "metrics")


@given(st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, 255)), max_size=8), st.integers(0, 10_000))
@settings(max_examples=300, deadline=None)
def test_a_corrupted_compact_body_is_refused_as_invalid_never_anything_else(
    changes: list[tuple[int, int]], cut: int
) -> None:
    body = bytearray(encode("node-a", [GPU, POOL], report={"ts": NOW, "pools": {}}))
    for place, value in changes:
        body[place % len(body)] = value
    with contextlib.suppress(InvalidBatch):  # anything else (a 500) fails the test
        checked(decode_columns(bytes(body[: max(1, len(body) - cut % 40)]), max_samples=100), **LIMITS)


def test_a_compact_extra_nested_too_deep_is_refused() -> None:
    deep = json.loads("[" * 150 + "]" * 150)
    with pytest.raises(InvalidBatch) as refused:
        decode_columns(encode("node-a", [GPU, {**POOL, "extra": {"x": deep}}]), max_samples=100)
    assert (refused.value.problems[0].sample, refused.value.problems[0].field) == (1, "extra")

"""Remote write 2.0 bodies decode to the series their 1.0 equivalents decode to, and each protocol fault is named."""

from __future__ import annotations

import struct
from collections.abc import Callable, Mapping, Sequence

import cramjam
import pytest

from collector.remote.prompb import remote_pb2, types_pb2, write_v2_pb2
from collector.remote.series import RemoteSeries
from collector.remote.write_request import InvalidWriteRequest, decode_write_request
from collector.remote.write_request_v2 import decode_write_request_v2

LIMIT = 1 << 20
STALE = struct.unpack("<d", struct.pack("<Q", 0x7FF0000000000002))[0]  # Prometheus' stale marker, a NaN of its own

Series = tuple[Mapping[str, str], Sequence[tuple[int, float]], int]  # labels, (ms, value) samples, histograms


def snappy(raw: bytes) -> bytes:
    return bytes(cramjam.snappy.compress_raw(raw))


def v1_body(series: Sequence[Series]) -> bytes:
    request = remote_pb2.WriteRequest()
    for labels, samples, histograms in series:
        ts = request.timeseries.add()
        ts.labels.extend(types_pb2.Label(name=k, value=v) for k, v in sorted(labels.items()))
        ts.samples.extend(types_pb2.Sample(timestamp=t, value=v) for t, v in samples)
        ts.histograms.extend(types_pb2.Histogram(count_int=1, timestamp=t) for t in range(histograms))
    return snappy(request.SerializeToString())


def v2_request(series: Sequence[Series]) -> write_v2_pb2.Request:
    """Interned as a sender does: one symbols table, "" first, each string once, metadata refs into it too."""
    request = write_v2_pb2.Request(symbols=[""])
    refs = {"": 0}

    def ref(text: str) -> int:
        if text not in refs:
            refs[text] = len(request.symbols)
            request.symbols.append(text)
        return refs[text]

    for labels, samples, histograms in series:
        ts = request.timeseries.add()
        ts.labels_refs.extend(r for k, v in sorted(labels.items()) for r in (ref(k), ref(v)))
        ts.samples.extend(write_v2_pb2.Sample(timestamp=t, value=v) for t, v in samples)
        ts.histograms.extend(write_v2_pb2.Histogram(count_int=1, timestamp=t) for t in range(histograms))
        ts.metadata.type = write_v2_pb2.Metadata.METRIC_TYPE_GAUGE
        ts.metadata.help_ref = ref("what it measures")
    return request


def v2_body(series: Sequence[Series]) -> bytes:
    return snappy(v2_request(series).SerializeToString())


def bits(found: list[RemoteSeries]) -> list[tuple[dict[str, str], list[tuple[float, bytes]]]]:
    """Series compared with their values as bit patterns: a stale marker is a NaN, never equal to itself."""
    return [(dict(s.labels), [(t, struct.pack("<d", v)) for t, v in s.samples]) for s in found]


GPU = {"__name__": "DCGM_FI_DEV_GPU_UTIL", "gpu": "0", "Hostname": "gpu-node-a"}
WAITING = {"__name__": "vllm:num_requests_waiting", "model_name": "meta-llama/Llama-3.1-8B-Instruct"}
LATENCY = {"__name__": "vllm:e2e_request_latency_seconds", "model_name": "meta-llama/Llama-3.1-8B-Instruct"}

EQUIVALENT: dict[str, tuple[list[Series], int]] = {
    "one series, one sample": ([(GPU, [(1_767_225_600_123, 87.0)], 0)], 0),
    "two series sharing symbols": (
        [(GPU, [(1_000, 1.0), (16_000, 2.5)], 0), ({**GPU, "gpu": "1"}, [(1_000, 12)], 0)],
        0,
    ),
    "a stale marker passes through": ([(WAITING, [(2_000, 3.0), (17_000, STALE)], 0)], 0),
    "histograms counted, not returned": ([(WAITING, [(5_000, 7.0)], 0), (LATENCY, [], 3)], 3),
    "an empty request": ([], 0),
}


@pytest.mark.parametrize(("series", "histograms"), EQUIVALENT.values(), ids=EQUIVALENT.keys())
def test_a_v2_body_decodes_as_its_1_0_equivalent(series: list[Series], histograms: int) -> None:
    found, found_histograms = decode_write_request_v2(v2_body(series), max_decoded_bytes=LIMIT)
    expected, expected_histograms = decode_write_request(v1_body(series), max_decoded_bytes=LIMIT)
    assert bits(found) == bits(expected)
    assert [dict(s.labels) for s in found] == [labels for labels, samples, _ in series if samples]
    assert found_histograms == expected_histograms == histograms


def test_timestamps_become_unix_seconds() -> None:
    found, _ = decode_write_request_v2(v2_body([(GPU, [(1_767_225_600_123, 87.0)], 0)]), max_decoded_bytes=LIMIT)
    assert found == [RemoteSeries(GPU, ((1_767_225_600.123, 87.0),))]


def with_refs(*refs: int) -> Callable[[write_v2_pb2.Request], None]:
    def edit(request: write_v2_pb2.Request) -> None:
        request.timeseries[0].ClearField("labels_refs")
        request.timeseries[0].labels_refs.extend(refs)

    return edit


def first_symbol(text: str) -> Callable[[write_v2_pb2.Request], None]:
    def edit(request: write_v2_pb2.Request) -> None:
        request.symbols[0] = text

    return edit


# GPU interned first: 0 "", 1 "Hostname", 2 "gpu-node-a", 3 "__name__", 4 "DCGM_FI_DEV_GPU_UTIL", 5 "gpu", 6 "0";
# 11 symbols in all once the help text and WAITING's three new strings follow
FAULTS: dict[str, tuple[Callable[[write_v2_pb2.Request], None], str]] = {
    "a ref past the symbols table": (
        with_refs(3, 4, 5, 99),
        r"timeseries\[0\]: labels_refs 99 outside the symbols table of 11",
    ),
    "an odd number of refs": (with_refs(3, 4, 5), r"timeseries\[0\]: 3 labels_refs, not \(name, value\) pairs"),
    "no __name__": (with_refs(5, 6, 1, 2), r"timeseries\[0\]: no __name__ label"),
    "a duplicated label name": (with_refs(3, 4, 5, 6, 5, 2), r"timeseries\[0\]: label 'gpu' appears twice"),
    "an empty label name": (with_refs(3, 4, 0, 6), r"timeseries\[0\]: a label with an empty name"),
    "symbols[0] not empty": (first_symbol("up"), r"symbols\[0\]: 'up', must be the empty string"),
}


@pytest.mark.parametrize(("edit", "message"), FAULTS.values(), ids=FAULTS.keys())
def test_a_request_breaking_the_protocol_is_refused_with_its_fault(
    edit: Callable[[write_v2_pb2.Request], None], message: str
) -> None:
    request = v2_request([(GPU, [(1_000, 87.0)], 0), (WAITING, [(1_000, 3.0)], 0)])
    edit(request)
    with pytest.raises(InvalidWriteRequest, match=message):
        decode_write_request_v2(snappy(request.SerializeToString()), max_decoded_bytes=LIMIT)


def varint(n: int) -> bytes:
    out = bytearray()
    while n > 0x7F:
        out.append(n & 0x7F | 0x80)
        n >>= 7
    return bytes([*out, n])


SNAPPY_FAULTS = {
    "not snappy": (b"\xff" * 6, LIMIT, r"body: not snappy-compressed \(block format"),
    "a corrupt block": (varint(64) + b"\x00\x01", LIMIT, r"body: not snappy-compressed, or a corrupt block"),
    "over the bound": (snappy(b"\x00" * 10_000), 1_000, r"body: 10000 bytes uncompressed, over the 1000-byte limit"),
    # a 2 GiB header over 2 bytes: inflating would fail as corrupt; the bound refuses it from the header alone
    "a bomb, refused before inflating": (varint(1 << 31) + b"\x00\x01", LIMIT, r"2147483648 bytes uncompressed, over"),
}


@pytest.mark.parametrize(("body", "limit", "message"), SNAPPY_FAULTS.values(), ids=SNAPPY_FAULTS.keys())
def test_a_body_is_inflated_and_bounded_as_1_0_does(body: bytes, limit: int, message: str) -> None:
    for decode in (decode_write_request_v2, decode_write_request):
        with pytest.raises(InvalidWriteRequest, match=message):
            decode(body, max_decoded_bytes=limit)


NOT_V2 = {
    "not protobuf": (snappy(b"\xff\xff\xff"), r"body: not a protobuf io.prometheus.write.v2.Request"),
    "a 1.0 WriteRequest": (v1_body([(GPU, [(1_000, 87.0)], 0)]), r"no timeseries; a 1.0 WriteRequest sent as 2.0\?"),
}


@pytest.mark.parametrize(("body", "message"), NOT_V2.values(), ids=NOT_V2.keys())
def test_a_body_that_is_no_v2_request_is_refused(body: bytes, message: str) -> None:
    with pytest.raises(InvalidWriteRequest, match=message):
        decode_write_request_v2(body, max_decoded_bytes=LIMIT)

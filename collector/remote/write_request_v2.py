"""Prometheus remote write 2.0 bodies: snappy-compressed (block format) protobuf ``io.prometheus.write.v2.Request``.

The Remote-Write 2.0 specification (2.0-rc.4): the sender says ``Content-Type:
application/x-protobuf;proto=io.prometheus.write.v2.Request`` and ``Content-Encoding: snappy``; every string is
interned in one ``symbols`` table whose entry 0 is the empty string, and a series names its labels by
``labels_refs``, (name, value) index pairs into it; millisecond timestamps. The label rules are 1.0's
(``collector.remote.write_request``). Native histograms are counted, not derived from; exemplars and metadata
are not read.
"""

from __future__ import annotations

from collections.abc import Sequence

from google.protobuf.message import DecodeError

from collector.remote.prompb.write_v2_pb2 import Request
from collector.remote.series import RemoteSeries
from collector.remote.wire_counts import MalformedWire, WireBounds, count_write_request_v2
from collector.remote.write_request import InvalidWriteRequest, label_set, snappy_decompressed

CONTENT_TYPE = "application/x-protobuf;proto=io.prometheus.write.v2.Request"


def decode_write_request_v2(
    body: bytes, *, max_decoded_bytes: int, bounds: WireBounds | None = None
) -> tuple[list[RemoteSeries], int]:
    """The series of one remote-write 2.0 body and how many native-histogram samples it carried (not derived from).

    Raises ``InvalidWriteRequest`` naming the fault: not snappy, larger than ``max_decoded_bytes`` uncompressed, not
    a Request (a 1.0 WriteRequest included), symbols not starting with the empty string, or a series whose
    ``labels_refs`` are odd in number or point past the symbols table, or break 1.0's label rules;
    ``WireLimitExceeded`` past ``bounds``, counted before anything is decoded.
    """
    raw = snappy_decompressed(body, max_decoded_bytes)
    request = Request()
    try:
        count_write_request_v2(raw, bounds or WireBounds())
        request.ParseFromString(raw)
    except (DecodeError, MalformedWire) as exc:
        raise InvalidWriteRequest(f"body: not a protobuf io.prometheus.write.v2.Request ({exc})") from None
    if raw and not request.symbols and not request.timeseries:
        # 1.0's fields 1-3 are reserved in Request, so a WriteRequest parses as an empty one: refuse, never store 0
        raise InvalidWriteRequest("body: no symbols and no timeseries; a 1.0 WriteRequest sent as 2.0?")
    symbols = request.symbols
    if symbols and symbols[0]:
        raise InvalidWriteRequest(f"symbols[0]: {symbols[0]!r}, must be the empty string")
    found: list[RemoteSeries] = []
    histograms = 0
    for index, series in enumerate(request.timeseries):
        labels = _series_labels(index, series.labels_refs, symbols)
        histograms += len(series.histograms)
        if series.samples:
            found.append(RemoteSeries(labels, tuple((s.timestamp / 1000.0, s.value) for s in series.samples)))
    return found, histograms


def _series_labels(index: int, refs: Sequence[int], symbols: Sequence[str]) -> dict[str, str]:
    if len(refs) % 2:
        raise InvalidWriteRequest(f"timeseries[{index}]: {len(refs)} labels_refs, not (name, value) pairs")
    outside = [ref for ref in refs if ref >= len(symbols)]
    if outside:
        raise InvalidWriteRequest(
            f"timeseries[{index}]: labels_refs {outside[0]} outside the symbols table of {len(symbols)}"
        )
    return label_set(index, [(symbols[n], symbols[v]) for n, v in zip(refs[::2], refs[1::2], strict=True)])

"""Prometheus remote write 1.0 bodies: snappy-compressed (block format) protobuf ``prometheus.WriteRequest``.

The protocol's own rules (the remote-write 1.0 specification): ``Content-Encoding: snappy``, ``Content-Type:
application/x-protobuf``, ``X-Prometheus-Remote-Write-Version: 0.1.0``; millisecond timestamps; every series carries
a ``__name__``; label names unique within a series. Native histograms (``TimeSeries.histograms``, experimental in
Prometheus 2.40–2.x) and exemplars are not derived from and are counted as dropped.
"""

from __future__ import annotations

from collections.abc import Sequence

import cramjam
from google.protobuf.message import DecodeError

from collector.errors import CollectorError
from collector.remote.prompb.remote_pb2 import WriteRequest
from collector.remote.series import RemoteSeries
from collector.remote.wire_counts import MalformedWire, WireBounds, count_write_request

MAX_LABELS_PER_SERIES = WireBounds.max_labels_per_series


class InvalidWriteRequest(CollectorError, ValueError):
    """A body that is not a snappy-compressed WriteRequest, or one breaking the protocol; the message says which."""


def decode_write_request(
    body: bytes, *, max_decoded_bytes: int, bounds: WireBounds | None = None
) -> tuple[list[RemoteSeries], int]:
    """The series of one remote-write body and how many native-histogram samples it carried (not derived from).

    Raises ``InvalidWriteRequest`` naming the fault: not snappy, larger than ``max_decoded_bytes`` uncompressed, not
    a WriteRequest, or a series without ``__name__``, with a duplicated or empty label name, or too many labels;
    ``WireLimitExceeded`` for a body holding more than ``bounds`` allow, counted before anything is decoded.
    """
    raw = snappy_decompressed(body, max_decoded_bytes)
    request = WriteRequest()
    try:
        count_write_request(raw, bounds or WireBounds())
        request.ParseFromString(raw)
    except (DecodeError, MalformedWire) as exc:
        raise InvalidWriteRequest(f"body: not a protobuf prometheus.WriteRequest ({exc})") from None
    found: list[RemoteSeries] = []
    histograms = 0
    for index, series in enumerate(request.timeseries):
        labels = label_set(index, [(pair.name, pair.value) for pair in series.labels])
        histograms += len(series.histograms)
        if series.samples:
            found.append(RemoteSeries(labels, tuple([(s.timestamp / 1000.0, s.value) for s in series.samples])))
    return found, histograms


def snappy_decompressed(body: bytes, max_decoded_bytes: int) -> bytes:
    """The snappy block ``body`` inflated, refused by its own length header past ``max_decoded_bytes`` (a bomb is
    never inflated); ``InvalidWriteRequest`` naming the fault."""
    try:
        length = cramjam.snappy.decompress_raw_len(body)
    except cramjam.DecompressionError:
        raise InvalidWriteRequest("body: not snappy-compressed (block format, as remote write sends)") from None
    if length > max_decoded_bytes:
        raise InvalidWriteRequest(f"body: {length} bytes uncompressed, over the {max_decoded_bytes}-byte limit")
    try:
        return bytes(cramjam.snappy.decompress_raw(body))
    except cramjam.DecompressionError as exc:
        raise InvalidWriteRequest(f"body: not snappy-compressed, or a corrupt block ({exc})") from None


def label_set(index: int, pairs: Sequence[tuple[str, str]]) -> dict[str, str]:
    """A series' labels by name, as the protocol allows them (both versions): every name non-empty and once, at most
    ``MAX_LABELS_PER_SERIES``, a ``__name__``; ``index`` names the series in the error."""
    labels = dict(pairs)
    if len(labels) < len(pairs) or "" in labels:
        _refuse_names(index, pairs)
    if len(labels) > MAX_LABELS_PER_SERIES:
        raise InvalidWriteRequest(f"timeseries[{index}]: {len(labels)} labels, over {MAX_LABELS_PER_SERIES}")
    if not labels.get("__name__"):
        raise InvalidWriteRequest(f"timeseries[{index}]: no __name__ label")
    return labels


def _refuse_names(index: int, pairs: Sequence[tuple[str, str]]) -> None:
    """``InvalidWriteRequest`` naming the first empty or repeated label name of ``pairs``."""
    seen: set[str] = set()
    for name, _ in pairs:
        if not name:
            raise InvalidWriteRequest(f"timeseries[{index}]: a label with an empty name")
        if name in seen:
            raise InvalidWriteRequest(f"timeseries[{index}]: label {name!r} appears twice")
        seen.add(name)

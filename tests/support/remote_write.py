"""Remote-write bodies as Prometheus sends them: snappy-compressed ``prometheus.WriteRequest`` (remote write 1.0)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence

import cramjam
from fastapi.testclient import TestClient

from collector.remote.prompb.remote_pb2 import WriteRequest

REMOTE_WRITE_HEADERS = {
    "Content-Encoding": "snappy",
    "Content-Type": "application/x-protobuf",
    "X-Prometheus-Remote-Write-Version": "0.1.0",
}

Series = tuple[Mapping[str, str], Sequence[tuple[float, float]]]  # labels (with __name__), (Unix seconds, value)
Writer = Callable[[Sequence[Series]], tuple[int, str]]


def write_request(series: Iterable[Series]) -> bytes:
    """The snappy-compressed WriteRequest of ``series``; timestamps in milliseconds, labels sorted, as Prometheus."""
    request = WriteRequest()
    for labels, points in series:
        one = request.timeseries.add()
        for name, text in sorted(labels.items()):
            one.labels.add(name=name, value=text)
        for ts, value in points:
            one.samples.add(value=value, timestamp=round(ts * 1000))
    return bytes(cramjam.snappy.compress_raw(request.SerializeToString()))


def named(name: str, **labels: str) -> dict[str, str]:
    """Labels of a series: ``named("DCGM_FI_DEV_GPU_UTIL", gpu="0", Hostname="gpu-1")``."""
    return {"__name__": name, **labels}


def writer_for(client: TestClient, token_headers: Mapping[str, str]) -> Writer:
    """``send(series) -> (status, text)``: each call one remote-write POST through ``client`` with that token."""
    headers = {**token_headers, **REMOTE_WRITE_HEADERS}

    def send(series: Sequence[Series]) -> tuple[int, str]:
        answer = client.post("/api/v1/write", content=write_request(series), headers=headers)
        return answer.status_code, answer.text

    return send

"""A real Prometheus 2.42 scrapes the fixture exporters and remote-writes to a recorder: what arrives, and what a
restart on the same TSDB sends again (nothing: see tests/support/prometheus.py)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import cramjam
import pytest

from collector.remote.prompb import remote_pb2, types_pb2
from tests.support.fixture_exporter import (
    DcgmGpu,
    FixtureExporter,
    LoopbackServer,
    NetDevice,
    VllmEngine,
    render_dcgm,
    render_node_netdev,
    render_vllm,
)
from tests.support.prometheus import PrometheusProcess, RemoteWrite, promtool_check_config, require_program
from tests.support.waiting import wait_for

pytestmark = [pytest.mark.slow, pytest.mark.prometheus]

TOKEN = "fp_remote_write_test_token"
WAIT_S = 30.0  # the remote-write watcher of 2.42 sends its first batch about 5 s after start


@dataclass(frozen=True)
class Received:
    headers: dict[str, str]
    request: remote_pb2.WriteRequest
    status: int  # what the recorder answered


class WriteRecorder(LoopbackServer):
    """Records every POST as a decoded ``WriteRequest`` and answers the status it is told (200 at first)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._received: list[Received] = []
        self._status = 200
        super().__init__(self._handler())

    def answer_with(self, status: int) -> None:
        with self._lock:
            self._status = status

    def received(self) -> list[Received]:
        with self._lock:
            return list(self._received)

    def _record(self, headers: dict[str, str], body: bytes) -> int:
        request = remote_pb2.WriteRequest.FromString(bytes(cramjam.snappy.decompress_raw(body)))
        with self._lock:
            self._received.append(Received(headers, request, self._status))
            return self._status

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        record: Callable[[dict[str, str], bytes], int] = self._record

        class WriteHandler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                self.send_response(record(dict(self.headers.items()), body))
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, format: str, *args: object) -> None:
                pass

        return WriteHandler


def samples_of(received: list[Received], name: str) -> list[tuple[dict[str, str], int, float]]:
    """``(labels, timestamp_ms, value)`` of every sample of series ``name`` in ``received``."""
    found = []
    for item in received:
        for series in item.request.timeseries:
            labels = {label.name: label.value for label in series.labels}
            if labels["__name__"] == name:
                found += [(labels, sample.timestamp, sample.value) for sample in series.samples]
    return found


def timestamps(received: list[Received], name: str, *, status: int = 200) -> set[int]:
    return {ts for _, ts, _ in samples_of([item for item in received if item.status == status], name)}


def stored(prometheus: PrometheusProcess, name: str) -> set[int]:
    """The timestamps (ms) of the samples of ``name`` in Prometheus' own TSDB over the last 5 minutes."""
    return {round(float(ts) * 1000) for result in prometheus.query(f"{name}[5m]") for ts, _ in result["values"]}


@pytest.fixture
def recorder() -> Iterator[WriteRecorder]:
    require_program("prometheus")  # skip before starting anything
    with WriteRecorder() as recorder:
        yield recorder


def remote_prometheus(workdir: Path, recorder: WriteRecorder, *targets: str) -> PrometheusProcess:
    remote_write = RemoteWrite(f"{recorder.url}/api/v1/write", TOKEN)
    return PrometheusProcess(workdir=workdir, target=targets, remote_write=remote_write, scrape_interval_s=1.0)


def test_config_passes_promtool(tmp_path: Path, recorder: WriteRecorder) -> None:
    prometheus = remote_prometheus(tmp_path, recorder, "127.0.0.1:9400", "127.0.0.1:8000")
    verdict = promtool_check_config(prometheus.config_path)
    assert verdict.returncode == 0, verdict.output
    assert "SUCCESS" in verdict.output


def test_scrapes_arrive_as_write_requests_with_the_fixture_labels_and_values(
    tmp_path: Path, recorder: WriteRecorder
) -> None:
    gpu = DcgmGpu(0, "GPU-604ac76c", gpu_util_percent=87, power_usage_w=312.25, total_energy_mj=9_876_543, pod="vllm-0")
    engine = VllmEngine(num_requests_waiting=5, e2e_latency_buckets=(1,) * 21, e2e_latency_count=2)
    with (
        FixtureExporter(render_dcgm([gpu])) as dcgm,
        FixtureExporter(render_vllm([engine])) as vllm,
        remote_prometheus(tmp_path, recorder, dcgm.target, vllm.target),
    ):
        wait_for(lambda: samples_of(recorder.received(), "vllm:num_requests_waiting"), timeout_s=WAIT_S)
        wait_for(lambda: samples_of(recorder.received(), "DCGM_FI_DEV_GPU_UTIL"), timeout_s=WAIT_S)
    received = recorder.received()

    labels, _, value = samples_of(received, "DCGM_FI_DEV_GPU_UTIL")[0]
    assert value == 87
    written = {name: value for name, value in gpu.labels().items() if value}  # Prometheus drops container=""
    assert labels == {"__name__": "DCGM_FI_DEV_GPU_UTIL", "instance": dcgm.target, "job": "fleetpilot"} | written
    assert "container" not in labels
    assert list(labels) == sorted(labels), "label pairs come sorted by name, byte order"
    assert samples_of(received, "DCGM_FI_DEV_POWER_USAGE")[0][2] == 312.25
    assert samples_of(received, "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION")[0][2] == 9_876_543  # no _total added
    waiting_labels, _, waiting = samples_of(received, "vllm:num_requests_waiting")[0]
    assert (waiting, waiting_labels["model_name"], waiting_labels["engine"]) == (5, engine.model_name, "0")
    buckets = {
        labels["le"]: value for labels, _, value in samples_of(received, "vllm:e2e_request_latency_seconds_bucket")
    }
    assert (buckets["0.3"], buckets["7680.0"], buckets["+Inf"]) == (1, 1, 2)

    headers = {name.lower(): value for name, value in received[0].headers.items()}
    assert headers["authorization"] == f"Bearer {TOKEN}"
    assert headers["content-encoding"] == "snappy"
    assert headers["content-type"] == "application/x-protobuf"
    assert headers["x-prometheus-remote-write-version"] == "0.1.0"
    assert headers["user-agent"].startswith("Prometheus/2.42")


def test_metadata_comes_in_requests_without_series(tmp_path: Path, recorder: WriteRecorder) -> None:
    with (
        FixtureExporter(render_node_netdev([NetDevice("eth0", 10, 20)])) as node,
        remote_prometheus(tmp_path, recorder, node.target),
    ):
        wait_for(lambda: [item for item in recorder.received() if item.request.metadata], timeout_s=WAIT_S)
    with_metadata = [item.request for item in recorder.received() if item.request.metadata]
    assert all(not request.timeseries for request in with_metadata)
    metadata = {(m.metric_family_name, m.type, m.help) for request in with_metadata for m in request.metadata}
    assert (
        "node_network_receive_bytes_total",
        types_pb2.MetricMetadata.COUNTER,
        "Network device statistic receive_bytes.",
    ) in metadata


def test_a_5xx_answer_is_retried_with_the_same_samples_and_a_4xx_answer_drops_them(
    tmp_path: Path, recorder: WriteRecorder
) -> None:
    name = "node_network_receive_bytes_total"

    def refusals(status: int) -> list[list[int]]:
        items = [item for item in recorder.received() if item.status == status]
        return [sorted(ts for _, ts, _ in samples_of([item], name)) for item in items if samples_of([item], name)]

    with (
        FixtureExporter(render_node_netdev([NetDevice("eth0", 10, 20)])) as node,
        remote_prometheus(tmp_path, recorder, node.target),
    ):
        wait_for(lambda: timestamps(recorder.received(), name), timeout_s=WAIT_S)
        recorder.answer_with(400)
        wait_for(lambda: len(refusals(400)) >= 3, timeout_s=WAIT_S)
        recorder.answer_with(503)
        wait_for(lambda: len(refusals(503)) >= 3, timeout_s=WAIT_S)
    dropped, retried = refusals(400), refusals(503)
    assert len({tuple(batch) for batch in dropped}) == len(dropped), f"each 400 batch sent once: {dropped}"
    assert retried[0] == retried[1] == retried[2], f"a 503 batch is sent again as it was: {retried}"


def test_restart_on_the_same_tsdb_sends_neither_acknowledged_nor_unsent_samples_again(
    tmp_path: Path, recorder: WriteRecorder
) -> None:
    name = "node_network_receive_bytes_total"
    with FixtureExporter(render_node_netdev([NetDevice("eth0", 10, 20)])) as node:
        prometheus = remote_prometheus(tmp_path, recorder, node.target)
        with prometheus:
            wait_for(lambda: len(timestamps(recorder.received(), name)) >= 2, timeout_s=WAIT_S)
            recorder.answer_with(503)  # retried, so every later sample stays unsent in the WAL
            wait_for(lambda: len(timestamps(recorder.received(), name, status=503)) >= 1, timeout_s=WAIT_S)
            wait_for(lambda: len(stored(prometheus, name)) >= 4, timeout_s=WAIT_S)
            stored_before = stored(prometheus, name)
        acknowledged_before = timestamps(recorder.received(), name)
        assert (prometheus.tsdb_path / "wal").is_dir()
        unsent = stored_before - acknowledged_before
        assert unsent, "some samples were scraped while the recorder refused them"

        recorder.answer_with(200)
        requests_before = len(recorder.received())
        with prometheus:  # same workdir, port and TSDB: it replays its WAL into its own head
            wait_for(lambda: timestamps(recorder.received()[requests_before:], name), timeout_s=WAIT_S)
            stored_after = stored(prometheus, name)
    sent_after = timestamps(recorder.received()[requests_before:], name)

    assert stored_before <= stored_after, "the WAL survived the restart and was replayed locally"
    assert not sent_after & acknowledged_before, "acknowledged samples are not sent twice"
    assert not sent_after & unsent, "samples unsent at the stop are not sent after the restart either"
    assert min(sent_after) > max(stored_before)

"""A loopback ``/metrics`` endpoint whose text the test sets, and renderers of three real exporters' formats.

``FixtureExporter`` serves whatever text it was last given (``serve``), so a test changes the values between scrapes
and keeps the truth it rendered. The renderers follow their upstream definitions; values are the caller's, so a test
computes the rate or p99 it expects from the numbers it passed:

- ``render_dcgm``: NVIDIA/dcgm-exporter 3.3.x (3.3.5-3.4.0). Names, types and HELP from ``etc/default-counters.csv``;
  labels from the ``metricsFormat`` text/template (``gpu``, ``UUID``, ``device``, ``modelName``, ``Hostname``, then
  the label fields such as ``DCGM_FI_DRIVER_VERSION``, then, with ``--kubernetes``, ``container``, ``namespace``,
  ``pod``); values as its ``ToString``: integers plain, floats ``%f``.
- ``render_vllm``: vLLM 0.9 (V1) ``vllm/v1/metrics/loggers.py`` ``PrometheusStatLogger`` (labels ``model_name``,
  ``engine``; ``request_latency_buckets``), rendered by prometheus_client as vLLM serves it; the families and HELP
  texts of ``inference_agent/probes/fixtures/engines/vllm_scrape_1.prom``.
- ``render_node_netdev``: prometheus/node_exporter ``collector/netdev_linux.go`` and ``netdev_common.go``
  (``node_network_<stat>_total{device}``, HELP ``Network device statistic <stat>.``), floats as client_golang writes
  them (Go ``strconv.FormatFloat(v, 'g', -1, 64)``).
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Self

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.exposition import generate_latest
from prometheus_client.registry import Collector, CollectorRegistry

TEXT_CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


class LoopbackServer:
    """``with LoopbackServer(Handler) as server:`` serves ``Handler`` on 127.0.0.1 at a free port from a thread."""

    def __init__(self, handler: type[BaseHTTPRequestHandler]) -> None:
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.httpd.daemon_threads = True
        self._thread = threading.Thread(target=self.httpd.serve_forever, name="loopback-http", daemon=True)

    @property
    def target(self) -> str:
        """``host:port``, as a Prometheus ``static_configs`` target names it."""
        host, port = self.httpd.server_address[:2]
        return f"{host!s}:{port}"

    @property
    def url(self) -> str:
        return f"http://{self.target}"

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(self, *_exc: type[BaseException] | BaseException | TracebackType | None) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self._thread.join(timeout=5.0)


class FixtureExporter(LoopbackServer):
    """``with FixtureExporter() as exporter: exporter.serve(render_dcgm([...]))``; GET ``/metrics`` answers the text
    last served (404 elsewhere) and counts the scrapes."""

    def __init__(self, text: str = "") -> None:
        self._lock = threading.Lock()
        self._text = text
        self._scrapes = 0
        super().__init__(self._handler())

    def serve(self, text: str) -> None:
        """Answer the following scrapes with ``text``."""
        with self._lock:
            self._text = text

    @property
    def scrapes(self) -> int:
        with self._lock:
            return self._scrapes

    def _scrape(self) -> bytes:
        with self._lock:
            self._scrapes += 1
            return self._text.encode()

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        scrape: Callable[[], bytes] = self._scrape

        class MetricsHandler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                if self.path.split("?", 1)[0] != "/metrics":
                    self.send_error(404)
                    return
                body = scrape()
                self.send_response(200)
                self.send_header("Content-Type", TEXT_CONTENT_TYPE)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: object) -> None:
                pass  # quiet: a scrape a second would flood the test output

        return MetricsHandler


# --- dcgm-exporter ---------------------------------------------------------------------------------------------------

# (field, Prometheus type, HELP) as etc/default-counters.csv lists them, in its order
DCGM_COUNTERS: tuple[tuple[str, str, str], ...] = (
    ("DCGM_FI_DEV_SM_CLOCK", "gauge", "SM clock frequency (in MHz)."),
    ("DCGM_FI_DEV_GPU_TEMP", "gauge", "GPU temperature (in C)."),
    ("DCGM_FI_DEV_POWER_USAGE", "gauge", "Power draw (in W)."),
    ("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "counter", "Total energy consumption since boot (in mJ)."),
    ("DCGM_FI_DEV_GPU_UTIL", "gauge", "GPU utilization (in %)."),
    ("DCGM_FI_DEV_MEM_COPY_UTIL", "gauge", "Memory utilization (in %)."),
    ("DCGM_FI_DEV_FB_FREE", "gauge", "Framebuffer memory free (in MiB)."),
    ("DCGM_FI_DEV_FB_USED", "gauge", "Framebuffer memory used (in MiB)."),
)


@dataclass(frozen=True)
class DcgmGpu:
    """One GPU's readings as dcgm-exporter reports them; ``pod`` set means the kubernetes mapping is on."""

    gpu: int
    uuid: str
    model_name: str = "NVIDIA H100 80GB HBM3"
    hostname: str = "gpu-node-a"
    driver_version: str = "550.90.07"
    gpu_util_percent: int = 0
    mem_copy_util_percent: int = 0
    fb_used_mib: int = 0
    fb_free_mib: int = 81559
    power_usage_w: float = 70.0
    gpu_temp_c: int = 35
    sm_clock_mhz: int = 1980
    total_energy_mj: int = 0
    pod: str | None = None
    namespace: str = "default"
    container: str = ""

    def value(self, field_name: str) -> int | float:
        values: dict[str, int | float] = {
            "DCGM_FI_DEV_SM_CLOCK": self.sm_clock_mhz,
            "DCGM_FI_DEV_GPU_TEMP": self.gpu_temp_c,
            "DCGM_FI_DEV_POWER_USAGE": self.power_usage_w,
            "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION": self.total_energy_mj,
            "DCGM_FI_DEV_GPU_UTIL": self.gpu_util_percent,
            "DCGM_FI_DEV_MEM_COPY_UTIL": self.mem_copy_util_percent,
            "DCGM_FI_DEV_FB_FREE": self.fb_free_mib,
            "DCGM_FI_DEV_FB_USED": self.fb_used_mib,
        }
        return values[field_name]

    def labels(self) -> dict[str, str]:
        """The template's order: identity, ``Hostname``, label fields, then sorted kubernetes attributes."""
        labels = {
            "gpu": str(self.gpu),
            "UUID": self.uuid,
            "device": f"nvidia{self.gpu}",
            "modelName": self.model_name,
            "Hostname": self.hostname,
            "DCGM_FI_DRIVER_VERSION": self.driver_version,
        }
        if self.pod is not None:
            labels |= {"container": self.container, "namespace": self.namespace, "pod": self.pod}
        return labels


def render_dcgm(gpus: Sequence[DcgmGpu]) -> str:
    """dcgm-exporter's ``/metrics`` for ``gpus``: per counter a HELP and TYPE, then one line per GPU."""
    lines: list[str] = []
    for name, prom_type, help_text in DCGM_COUNTERS:
        lines += [f"# HELP {name} {help_text}", f"# TYPE {name} {prom_type}"]
        for gpu in gpus:
            value = gpu.value(name)
            rendered = f"{value:f}" if isinstance(value, float) else str(value)
            lines.append(f"{name}{{{_label_text(gpu.labels())}}} {rendered}")
    return "\n".join(lines) + "\n"


# --- vLLM ------------------------------------------------------------------------------------------------------------

# vllm/v1/metrics/loggers.py request_latency_buckets (e2e, queue, prefill, decode and inference time), in seconds
VLLM_REQUEST_LATENCY_BUCKETS_S: tuple[float, ...] = (
    0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0,
    1920.0, 7680.0,
)  # fmt: skip


@dataclass(frozen=True)
class VllmEngine:
    """One engine's state: gauges now, counters and the e2e histogram cumulative since the engine started.

    ``e2e_latency_buckets`` holds the cumulative count at or below each bound of ``VLLM_REQUEST_LATENCY_BUCKETS_S``;
    ``e2e_latency_count`` is the ``+Inf`` bucket and ``_count`` (requests finished).
    """

    model_name: str = "meta-llama/Llama-3.1-8B-Instruct"
    engine: str = "0"
    num_requests_running: int = 0
    num_requests_waiting: int = 0
    kv_cache_usage_perc: float = 0.0
    generation_tokens_total: int = 0
    request_success_total: Mapping[str, int] = field(default_factory=lambda: {"stop": 0, "length": 0, "abort": 0})
    e2e_latency_buckets: tuple[int, ...] = (0,) * len(VLLM_REQUEST_LATENCY_BUCKETS_S)
    e2e_latency_count: int = 0
    e2e_latency_sum_s: float = 0.0
    created_s: float = 1.7644241428512275e09  # the counters' _created, as in vllm_scrape_1.prom

    def __post_init__(self) -> None:
        counts = (*self.e2e_latency_buckets, self.e2e_latency_count)
        if len(self.e2e_latency_buckets) != len(VLLM_REQUEST_LATENCY_BUCKETS_S):
            raise ValueError(f"e2e_latency_buckets needs {len(VLLM_REQUEST_LATENCY_BUCKETS_S)} cumulative counts")
        if any(later < earlier for earlier, later in itertools.pairwise(counts)):
            raise ValueError(f"bucket counts must be cumulative (never decreasing): {counts}")


class _VllmCollector(Collector):
    def __init__(self, engines: Sequence[VllmEngine]) -> None:
        self.engines = engines

    def collect(self) -> Iterator[Metric]:
        names = ["model_name", "engine"]
        running = GaugeMetricFamily(
            "vllm:num_requests_running", "Number of requests in model execution batches.", labels=names
        )
        waiting = GaugeMetricFamily(
            "vllm:num_requests_waiting", "Number of requests waiting to be processed.", labels=names
        )
        kv_cache = GaugeMetricFamily(
            "vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", labels=names
        )
        tokens = CounterMetricFamily("vllm:generation_tokens", "Number of generation tokens processed.", labels=names)
        success = CounterMetricFamily(
            "vllm:request_success", "Count of successfully processed requests.", labels=[*names, "finished_reason"]
        )
        e2e = HistogramMetricFamily(
            "vllm:e2e_request_latency_seconds", "Histogram of e2e request latency in seconds.", labels=names
        )
        for engine in self.engines:
            key = [engine.model_name, engine.engine]
            running.add_metric(key, engine.num_requests_running)
            waiting.add_metric(key, engine.num_requests_waiting)
            kv_cache.add_metric(key, engine.kv_cache_usage_perc)
            tokens.add_metric(key, engine.generation_tokens_total, created=engine.created_s)
            for reason, count in engine.request_success_total.items():
                success.add_metric([*key, reason], count, created=engine.created_s)
            buckets = [
                (repr(bound), count)
                for bound, count in zip(VLLM_REQUEST_LATENCY_BUCKETS_S, engine.e2e_latency_buckets, strict=True)
            ]
            e2e.add_metric(key, [*buckets, ("+Inf", engine.e2e_latency_count)], engine.e2e_latency_sum_s)
        yield from (running, waiting, kv_cache, tokens, success, e2e)


def render_vllm(engines: Sequence[VllmEngine]) -> str:
    """vLLM's ``/metrics`` families that fleetpilot reads, for ``engines``, written by prometheus_client."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_VllmCollector(engines))
    return generate_latest(registry).decode()


# --- node_exporter ---------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class NetDevice:
    """One interface's byte counters since boot, as /proc/net/dev reports them."""

    device: str
    receive_bytes_total: int
    transmit_bytes_total: int


def render_node_netdev(devices: Sequence[NetDevice]) -> str:
    """node_exporter's netdev families ``node_network_{receive,transmit}_bytes_total{device}`` for ``devices``."""
    lines: list[str] = []
    for stat in ("receive_bytes", "transmit_bytes"):
        name = f"node_network_{stat}_total"
        lines += [f"# HELP {name} Network device statistic {stat}.", f"# TYPE {name} counter"]
        for device in sorted(devices, key=lambda d: d.device):  # client_golang sorts a family's series
            value = device.receive_bytes_total if stat == "receive_bytes" else device.transmit_bytes_total
            lines.append(f"{name}{{{_label_text({'device': device.device})}}} {go_float(value)}")
    return "\n".join(lines) + "\n"


def go_float(value: float) -> str:
    """``value`` as Go's ``strconv.FormatFloat(value, 'g', -1, 64)``: shortest digits, exponent from 1e+06 up."""
    if value == 0:
        return "0"
    sign, digits, exponent = Decimal(repr(float(value))).normalize().as_tuple()
    assert isinstance(exponent, int), "finite numbers only"
    mantissa = "".join(map(str, digits))
    point = len(mantissa) + exponent  # digits before the decimal point: 1234000.0 → "1234", point 7
    prefix = "-" if sign else ""
    if point - 1 < -4 or point - 1 >= 6:
        fraction = f".{mantissa[1:]}" if len(mantissa) > 1 else ""
        return f"{prefix}{mantissa[0]}{fraction}e{point - 1:+03d}"
    if point <= 0:
        return f"{prefix}0.{'0' * -point}{mantissa}"
    whole, fraction = mantissa[:point].ljust(point, "0"), mantissa[point:]
    return f"{prefix}{whole}.{fraction}" if fraction else f"{prefix}{whole}"


def _label_text(labels: Mapping[str, str]) -> str:
    escaped = {
        name: value.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"") for name, value in labels.items()
    }
    return ",".join(f'{name}="{value}"' for name, value in escaped.items())

"""The 12 load metrics, declared once (CONTRACT section 4).

The sampler, the ingest model, the table columns, the Prometheus exposition and the predictor's features all derive
from ``METRICS``; ``tests/collector/test_catalog.py`` proves they agree.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class Scope(StrEnum):
    """Where a metric is measured: which of a sample's ``device``/``pool`` fields it travels with."""

    GPU = "gpu"
    NODE = "node"
    POOL_REPLICA = "pool_replica"


class PoolAggregate(StrEnum):
    """How a pool's series combines its replicas (CONTRACT section 6): rates add up, latency and use take the max."""

    SUM = "sum"
    MAX = "max"


@dataclass(frozen=True)
class Metric:
    name: str
    unit: str
    scope: Scope
    help: str
    source: str
    pool_aggregate: PoolAggregate
    minimum: float = 0.0
    maximum: float | None = None

    @property
    def is_ratio(self) -> bool:
        return self.maximum == 1.0


METRICS: tuple[Metric, ...] = (
    Metric(
        "gpu_utilization_ratio",
        "ratio",
        Scope.GPU,
        "Share of the last sample period during which a kernel ran on the GPU.",
        "nvmlDeviceGetUtilizationRates().gpu / 100 (DCGM_FI_DEV_GPU_UTIL)",
        PoolAggregate.MAX,
        maximum=1.0,
    ),
    Metric(
        "gpu_memory_used_bytes",
        "bytes",
        Scope.GPU,
        "GPU framebuffer memory in use.",
        "nvmlDeviceGetMemoryInfo().used (DCGM_FI_DEV_FB_USED is MiB)",
        PoolAggregate.SUM,
    ),
    Metric(
        "gpu_memory_bandwidth_utilization_ratio",
        "ratio",
        Scope.GPU,
        "Share of the last sample period during which device memory was read or written.",
        "nvmlDeviceGetUtilizationRates().memory / 100 (DCGM_FI_DEV_MEM_COPY_UTIL)",
        PoolAggregate.MAX,
        maximum=1.0,
    ),
    Metric(
        "gpu_power_watts",
        "watts",
        Scope.GPU,
        "GPU board power draw.",
        "nvmlDeviceGetPowerUsage() / 1000 (DCGM_FI_DEV_POWER_USAGE)",
        PoolAggregate.SUM,
    ),
    Metric(
        "gpu_temperature_celsius",
        "celsius",
        Scope.GPU,
        "GPU die temperature.",
        "nvmlDeviceGetTemperature(h, NVML_TEMPERATURE_GPU) (DCGM_FI_DEV_GPU_TEMP)",
        PoolAggregate.MAX,
    ),
    Metric(
        "network_throughput_bytes_per_second",
        "bytes_per_second",
        Scope.NODE,
        "Host NIC receive plus transmit rate.",
        "psutil.net_io_counters() rx+tx delta",
        PoolAggregate.SUM,
    ),
    Metric(
        "network_latency_seconds",
        "seconds",
        Scope.NODE,
        "Round trip of the agent's last push to the collector.",
        "agent push round trip",
        PoolAggregate.MAX,
    ),
    Metric(
        "request_rate_per_second",
        "per_second",
        Scope.POOL_REPLICA,
        "Request arrivals at the replica.",
        "engine request counter delta",
        PoolAggregate.SUM,
    ),
    Metric(
        "queue_depth_requests",
        "requests",
        Scope.POOL_REPLICA,
        "Requests admitted but not yet running.",
        "engine waiting queue length",
        PoolAggregate.SUM,
    ),
    Metric(
        "token_throughput_per_second",
        "per_second",
        Scope.POOL_REPLICA,
        "Generated tokens per second.",
        "engine generated-token counter delta",
        PoolAggregate.SUM,
    ),
    Metric(
        "request_latency_p99_seconds",
        "seconds",
        Scope.POOL_REPLICA,
        "End-to-end request latency, 99th percentile over the trailing 10 s.",
        "engine latency histogram",
        PoolAggregate.MAX,
    ),
    Metric(
        "kv_cache_utilization_ratio",
        "ratio",
        Scope.POOL_REPLICA,
        "KV-cache blocks in use over blocks available.",
        "engine block manager",
        PoolAggregate.MAX,
        maximum=1.0,
    ),
)

METRIC_NAMES: tuple[str, ...] = tuple(m.name for m in METRICS)
BY_NAME: dict[str, Metric] = {m.name: m for m in METRICS}


def metric(name: str) -> Metric:
    """The catalog entry for ``name``; ``KeyError`` names the unknown metric."""
    try:
        return BY_NAME[name]
    except KeyError:
        raise KeyError(f"unknown metric {name!r}; known: {', '.join(METRIC_NAMES)}") from None

"""What a rule may watch: the 12 catalog metrics, a few of the agent's ``extra`` figures, and one derived ratio.

The catalog metrics are columns (and ``fleetpilot_<metric>`` series in ``/metrics``, so they export to Prometheus
rules); the extras travel in a sample's ``extra`` and are read from the latest reading of each series. A figure the
agent did not send is absent, so a rule on it simply has nothing to judge there.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from wire.catalog import METRIC_NAMES

# The agent's extras worth alerting on (inference_agent/probes: host.py, nvml.py, engines.py, builtin.py).
EXTRA_SIGNALS: tuple[str, ...] = (
    "host_disk_io_latency_ms",
    "host_data_disk_usage_ratio",
    "host_nic_packet_loss_ratio",
    "host_cpu_ratio",
    "gpu_ecc_volatile_corrected_errors",
    "gpu_ecc_volatile_uncorrected_errors",
    "gpu_pcie_replay_count",
    "failed_requests_per_second",
    "time_to_first_token_p99_seconds",
    "preemptions_per_second",
    "replica_consecutive_crashes",
)
# Failed requests over all requests of a replica set: 0.5 failed/s of 40 req/s → 0.0125.
ERROR_RATIO = "request_error_ratio"
DERIVED_SIGNALS: tuple[str, ...] = (ERROR_RATIO,)
SIGNALS: frozenset[str] = frozenset(METRIC_NAMES) | frozenset(EXTRA_SIGNALS) | frozenset(DERIVED_SIGNALS)


def is_catalog_metric(name: str) -> bool:
    return name in METRIC_NAMES


def reading_values(metrics: Mapping[str, float], extra: Mapping[str, Any] | None) -> dict[str, float]:
    """Every signal one reading carries: its metrics, its numeric extras of :data:`EXTRA_SIGNALS`, the error ratio.

    An extra that is no 64-bit float (a 400-digit integer stored before ingest refused them) raises
    ``OverflowError``: the evaluator then skips that one reading, not the whole evaluation.
    """
    values = dict(metrics)
    for name in EXTRA_SIGNALS:
        value = (extra or {}).get(name)
        if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(number := float(value)):
            values[name] = number
    failed, total = values.get("failed_requests_per_second"), metrics.get("request_rate_per_second")
    if failed is not None and total is not None and total > 0:
        values[ERROR_RATIO] = failed / total
    return values

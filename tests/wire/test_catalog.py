"""The catalog is the one source of truth: the wire model, the tables and the exposition all agree with it."""

from __future__ import annotations

import pytest

from collector.exposition import FleetCollector, FleetSnapshot, exposition_name
from collector.tables import ROLLUP_STATS, rollup_column, rollups_1m, samples, series_latest
from wire.catalog import METRIC_NAMES, METRICS, Scope, metric
from wire.samples import MetricValues

CONTRACT_METRICS = [
    ("gpu_utilization_ratio", Scope.GPU),
    ("gpu_memory_used_bytes", Scope.GPU),
    ("gpu_memory_bandwidth_utilization_ratio", Scope.GPU),
    ("gpu_power_watts", Scope.GPU),
    ("gpu_temperature_celsius", Scope.GPU),
    ("network_throughput_bytes_per_second", Scope.NODE),
    ("network_latency_seconds", Scope.NODE),
    ("request_rate_per_second", Scope.POOL_REPLICA),
    ("queue_depth_requests", Scope.POOL_REPLICA),
    ("token_throughput_per_second", Scope.POOL_REPLICA),
    ("request_latency_p99_seconds", Scope.POOL_REPLICA),
    ("kv_cache_utilization_ratio", Scope.POOL_REPLICA),
]


def test_catalog_is_the_contract_table_in_order() -> None:
    assert [(m.name, m.scope) for m in METRICS] == CONTRACT_METRICS


def test_ratios_are_bounded_by_one_and_nothing_is_negative() -> None:
    for m in METRICS:
        assert m.minimum == 0.0, m.name
        assert (m.maximum == 1.0) == m.name.endswith("_ratio"), m.name


def test_wire_model_has_one_field_per_metric() -> None:
    assert tuple(MetricValues.model_fields) == METRIC_NAMES


@pytest.mark.parametrize("table", [samples, series_latest], ids=lambda t: t.name)
def test_tables_have_one_column_per_metric(table: object) -> None:
    columns = {c.name for c in table.columns}  # type: ignore[attr-defined]
    assert set(METRIC_NAMES) <= columns


def test_rollups_have_each_stat_of_each_metric() -> None:
    columns = {c.name for c in rollups_1m.columns}
    assert {rollup_column(n, s) for n in METRIC_NAMES for s in ROLLUP_STATS} <= columns


def test_exposition_declares_a_family_per_metric() -> None:
    families = {f.name for f in FleetCollector(lambda: FleetSnapshot([], {})).collect()}
    assert {exposition_name(n) for n in METRIC_NAMES} <= families


def test_unknown_metric_lookup_names_it() -> None:
    with pytest.raises(KeyError, match="gpu_fan_speed"):
        metric("gpu_fan_speed")

"""bench.lib.minute_series reads the repository's ServeGen series (the path holds wherever the module lives)."""

from __future__ import annotations

from bench.lib.minute_series import SERVEGEN, minute_demand


def test_each_servegen_series_becomes_minute_level_demand() -> None:
    for name in SERVEGEN:
        demand = minute_demand(name, 90)
        assert (len(demand.values), demand.step_seconds) == (90, 60.0)
        assert demand.values.min() >= 0.0 < demand.values.max()

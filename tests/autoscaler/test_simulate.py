"""The simulator's model (CONTRACT section 8) on small traces whose answers can be worked out by hand."""

from __future__ import annotations

import csv
import json
import math
import re
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from autoscaler.policy.settings import PolicySettings
from autoscaler.simulate import SimulationSettings, _Fleet, simulate, startup_steps
from fleetpilot.cli import main
from predictor.base import Forecast, History

STEP = 60.0
NO_STABILIZATION = PolicySettings(stabilization_window_seconds=0.0)


def trace(*values: float) -> History:
    return History(np.asarray(values, dtype=np.float64), STEP, start_ts=0.0)


def settings(startup: float = 120.0, **policy: object) -> SimulationSettings:
    return SimulationSettings(
        capacity_per_replica=10.0,
        startup_seconds=startup,
        policy=PolicySettings(**policy),  # type: ignore[arg-type]
    )


def test_startup_is_rounded_up_to_whole_steps() -> None:
    assert startup_steps(180.0, 60.0) == 3 and startup_steps(900.0, 600.0) == 2 and startup_steps(0.0, 60.0) == 0


def test_reactive_lags_a_step_up_by_the_startup_and_misses_those_steps() -> None:
    demand = trace(14, 14, 70, 70, 70, 70)  # 2 replicas at 0.7; then 10 are needed
    result = simulate(demand, "reactive", settings(startup=120.0))
    assert [s.desired for s in result.steps] == [2, 2, 10, 10, 10, 10]
    assert [s.ready for s in result.steps] == [2, 2, 2, 2, 10, 10]  # asked at step 2, ready at step 4
    assert result.slo_attainment(10.0) == pytest.approx(4 / 6)  # steps 2 and 3 short: 70 > 2 × 10
    assert result.replica_hours == pytest.approx((2 + 2 + 10 + 10 + 10 + 10) / 60)
    assert result.scale_events == 1


def test_scale_down_removes_starting_replicas_first_then_ready_ones_at_once() -> None:
    fleet = _Fleet(ready=1)
    fleet.resize(10, step=1, delay=10)  # 9 starting, ready at step 11
    fleet.resize(4, step=2, delay=10)  # 6 of the starting ones go, the ready one stays
    assert (fleet.ready, len(fleet.starting)) == (1, 3)
    fleet.resize(0, step=3, delay=10)  # the 3 starting, then the ready one
    assert (fleet.ready, len(fleet.starting)) == (0, 0)


def test_a_dip_shorter_than_the_startup_does_not_give_replicas_back() -> None:
    # 10-minute steps, 10-minute startup: HPA's 300 s window alone would drop to 5 at the dip and be 5 short at step 3.
    demand = History(np.array([70.0, 70.0, 35.0, 70.0, 70.0]), 600.0, start_ts=0.0)
    result = simulate(demand, "reactive", settings(startup=600.0))
    assert [s.desired for s in result.steps] == [10] * 5 and result.slo_attainment(10.0) == 1.0
    assert "stabilization window (600 s)" in result.steps[2].reason


def test_missing_demand_is_left_out_of_attainment() -> None:
    result = simulate(trace(7, math.nan, 7), "static", settings())
    assert result.slo_attainment(10.0) == 1.0
    assert math.isnan(result.steps[1].demand)


def test_static_peak_and_oracle() -> None:
    demand = trace(10, 50, 20)
    static = simulate(demand, "static", settings())
    assert {s.ready for s in static.steps} == {5} and static.slo_attainment(10.0) == 1.0
    oracle = simulate(demand, "oracle", settings())
    assert [s.ready for s in oracle.steps] == [1, 5, 2]
    assert oracle.replica_hours == pytest.approx(8 / 60)


def test_predictive_with_foresight_is_ready_before_the_ramp() -> None:
    values = np.array([14.0] * 5 + [70.0] * 5)
    demand = History(values, STEP)

    def foresight(history: History, horizon: int) -> Forecast:  # a perfect forecaster, to test the plumbing
        t = len(history)
        future = np.array([values[min(t + k, len(values) - 1)] for k in range(horizon)])
        return Forecast(future, future, future)

    reactive = simulate(demand, "reactive", settings(startup=120.0))
    predictive = simulate(demand, "predictive", settings(startup=120.0), forecast=foresight)
    assert predictive.slo_attainment(10.0) == 1.0
    assert reactive.slo_attainment(10.0) is not None and reactive.slo_attainment(10.0) < 1.0  # type: ignore[operator]


def test_the_first_fleet_serves_step_0_even_when_the_forecast_is_quieter() -> None:
    values = np.array([70.0, 14.0, 14.0])
    demand = History(values, STEP)

    def foresight(history: History, horizon: int) -> Forecast:
        future = np.array([values[min(len(history) + k, len(values) - 1)] for k in range(horizon)])
        return Forecast(future, future, future)

    result = simulate(demand, "predictive", settings(startup=60.0), forecast=foresight)
    assert result.steps[0].ready == 7  # ceil(70 / (1.0 × 10)), not the 2 that step 1's 14 alone would need
    assert "first fleet serves this step's demand" in result.steps[0].reason
    assert result.steps[1].desired == 7  # those 7 are the recommendation HPA's 300 s window then holds
    assert result.slo_attainment(10.0) == 1.0


def test_cli_writes_decisions_and_summary(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    series = tmp_path / "demand.csv"
    series.write_text("timestamp,value\n" + "".join(f"{60 * i},{20 + 10 * (i % 7)}\n" for i in range(120)))
    out = tmp_path / "out"
    code = main(
        [
            "simulate",
            str(series),
            "--capacity-per-replica",
            "10",
            "--startup",
            "2m",
            "--policy",
            "hybrid",
            "--out",
            str(out),
            "--compare",
        ]
    )
    assert code == 0
    assert (out / "decisions.csv").read_text().splitlines()[0] == "timestamp,demand,desired_replicas,ready_replicas"
    summary = json.loads((out / "summary.json").read_text())
    assert set(summary) == {"policy", "replica_hours", "slo_attainment", "scale_events"}
    assert summary["policy"] == "hybrid"
    compared = {row["policy"] for row in json.loads((out / "comparison.json").read_text())}
    assert compared == {"static", "reactive", "predictive", "hybrid", "oracle"}
    assert "oracle" in capsys.readouterr().out


def test_decisions_repeat_the_input_demand_exactly(tmp_path: Path) -> None:
    demand = ["1019036", "0.1", "123456.789012345", "", "2.5e-07", "98765432101"]  # "" is a missing value
    series = tmp_path / "demand.csv"
    series.write_text("timestamp,value\n" + "".join(f"{60 * i},{v}\n" for i, v in enumerate(demand)))
    out = tmp_path / "out"
    base = ["simulate", str(series), "--capacity-per-replica", "1000000", "--policy", "reactive"]
    assert main([*base, "--out", str(out)]) == 0
    with (out / "decisions.csv").open(newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert [row["demand"] for row in rows] == demand  # not 1.01904e+06 nor 1.23457e+05


def test_cli_rejects_unknown_policy_and_bad_capacity(tmp_path: Path) -> None:
    series = tmp_path / "demand.csv"
    series.write_text("timestamp,value\n0,1\n60,2\n")
    base = ["simulate", str(series), "--out", str(tmp_path / "o")]
    assert main([*base, "--capacity-per-replica", "10", "--policy", "yolo"]) == 2
    assert main([*base, "--capacity-per-replica", "-1"]) == 2
    assert main([*base, "--capacity-per-replica", "10", "--attainment-target", "lots"]) == 2
    assert main([*base, "--capacity-per-replica", "10", "--attainment-target", "1.2"]) == 2


def test_cli_attainment_target_none_sizes_on_the_bands_own_bound(tmp_path: Path) -> None:
    series = tmp_path / "demand.csv"
    series.write_text("timestamp,value\n" + "".join(f"{60 * i},{20 + 10 * (i % 7)}\n" for i in range(240)))
    base = ["simulate", str(series), "--capacity-per-replica", "10", "--startup", "2m", "--policy", "predictive"]
    hours = {}
    for target in ("none", "0.999"):
        assert main([*base, "--out", str(tmp_path / target), "--attainment-target", target]) == 0
        hours[target] = json.loads((tmp_path / target / "summary.json").read_text())["replica_hours"]
    assert hours["0.999"] > hours["none"]  # three nines start wider than the band's 95 % bound


def overconfident(history: History, horizon: int) -> Forecast:
    """The last value with a band a tenth of the noise's width: a forecaster that has not learnt its own error."""
    last = np.full(horizon, float(history.values[-1]))
    return Forecast(last, last * 0.99, last * 1.01)


@pytest.mark.parametrize("target", [0.9, 0.97])
def test_the_adapted_bound_brings_attainment_to_the_target_whatever_the_bands_calibration(target: float) -> None:
    rng = np.random.default_rng(7)
    demand = History(rng.normal(500.0, 50.0, 4000).clip(min=0.0), STEP, start_ts=0.0)
    run = settings(startup=60.0, attainment_target=target, tolerance=0.0, stabilization_window_seconds=0.0)
    result = simulate(demand, "predictive", run, forecast=overconfident)
    adapted = replace(result, steps=result.steps[1000:]).slo_attainment(10.0)  # once the scale has grown
    fixed_band = replace(run, policy=replace(run.policy, attainment_target=None))
    fixed = simulate(demand, "predictive", fixed_band, forecast=overconfident).slo_attainment(10.0)
    assert adapted is not None and fixed is not None
    assert abs(adapted - target) < 0.01  # quantile tracking: misses at the target's rate
    assert fixed < 0.75  # the band's own hi, a tenth too narrow: over a quarter of the steps missed


def test_cli_writes_a_report_with_a_chart_per_policy_run(tmp_path: Path) -> None:
    series = tmp_path / "demand.csv"
    series.write_text("timestamp,value\n" + "".join(f"{60 * i},{20 + 10 * (i % 7)}\n" for i in range(120)))
    base = ["simulate", str(series), "--capacity-per-replica", "10", "--startup", "2m", "--policy", "reactive"]
    assert main([*base, "--out", str(tmp_path / "one")]) == 0
    page = (tmp_path / "one" / "report.html").read_text()
    assert "Autoscaling simulation of demand.csv: 1 policy, one step 1 min" in page and "starts in 2 min" in page
    assert page.count("<svg") == 1 and "<h2>reactive</h2>" in page
    assert main([*base, "--out", str(tmp_path / "all"), "--compare"]) == 0
    compared = (tmp_path / "all" / "report.html").read_text()
    assert compared.count("<svg") == 5  # reactive first, then every other policy and the oracle
    assert re.findall(r"<h2>(\w+)</h2>", compared) == ["reactive", "static", "predictive", "hybrid", "oracle"]
    assert "http" not in compared.replace("http://www.w3.org/2000/svg", "")  # opens anywhere

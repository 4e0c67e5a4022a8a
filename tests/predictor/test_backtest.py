"""Rolling-origin backtest: horizon rounding, warm-up limit, exact MASE, no look-ahead, the outputs and the CLI."""

from __future__ import annotations

import csv
import json
import math
import re
import sys
import types
from datetime import datetime, timedelta
from pathlib import Path
from typing import Self

import numpy as np
import pytest

from fleetpilot.cli import main
from predictor.backtest import (
    BacktestError,
    backtest,
    coverage,
    default_warmup,
    horizon_steps,
    parse_duration,
    plan_backtest,
    smape,
    winkler,
)
from predictor.base import FloatArray, Forecast, ForecastError, History
from predictor.report import FORECAST_COLUMNS, write_outputs
from predictor.svg_chart import duration_words, human_number

SUMMARY_KEYS = {"model", "horizon_steps", "origins", "mase", "smape", "coverage90", "baselines"}


class Last:
    """The naive forecast with a ±1 interval: enough to check the plumbing."""

    name = "last"

    def __init__(self) -> None:
        self.values: FloatArray = np.empty(0)

    def fit(self, history: History) -> Self:
        self.values = history.values[np.isfinite(history.values)]
        return self

    def predict(self, horizon: int) -> Forecast:
        yhat = np.full(horizon, self.values[-1])
        return Forecast(yhat, yhat - 1, yhat + 1)


class Mean(Last):
    name = "mean"

    def predict(self, horizon: int) -> Forecast:
        yhat = np.full(horizon, self.values.mean())
        return Forecast(yhat, yhat - 1, yhat + 1)


class Recording(Last):
    """Remembers the last timestamp and the size of every history it was given."""

    name = "recording"

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[tuple[float, int]] = []
        self.updates = 0

    def fit(self, history: History) -> Self:
        underlying = history.values.base if history.values.base is not None else history.values
        self.seen.append((history.end_ts, len(underlying)))
        return super().fit(history)


class Updatable(Recording):
    def update(self, history: History) -> Self:
        self.updates += 1
        return super().fit(history)


class FailsOnOddLengths(Last):
    def fit(self, history: History) -> Self:
        if len(history) % 2:
            raise ForecastError("odd")
        return super().fit(history)


def hourly(values: list[float]) -> History:
    return History(np.array(values, dtype=float), 3600.0, 0.0)


@pytest.mark.parametrize(
    ("horizon", "step_s", "steps"),
    [("15m", 600, 2), ("15m", 60, 15), ("90s", 60, 2), ("900s", 600, 2), ("1h", 600, 6), ("900", 60, 15)],
)
def test_the_horizon_rounds_up_to_whole_steps(horizon: str, step_s: float, steps: int) -> None:
    assert horizon_steps(parse_duration(horizon), step_s) == steps


@pytest.mark.parametrize("text", ["15x", "", "m", "-1m", "0m", "15 minutes"])
def test_a_bad_duration_is_refused(text: str) -> None:
    with pytest.raises(BacktestError, match="duration"):
        parse_duration(text)


@pytest.mark.parametrize(("size", "step_s", "warmup"), [(2016, 600, 288), (60, 60, 30), (100, 3600, 48), (5, 60, 2)])
def test_the_default_warmup_is_two_days_at_most_half(size: int, step_s: float, warmup: int) -> None:
    assert default_warmup(size, step_s) == warmup
    assert warmup <= size // 2


def test_a_warmup_over_half_the_series_is_refused() -> None:
    assert plan_backtest(10, 60, 60, warmup_steps=5).warmup_steps == 5
    with pytest.raises(BacktestError, match="exceeds half"):
        plan_backtest(10, 60, 60, warmup_steps=6)
    with pytest.raises(BacktestError, match="no origin"):
        plan_backtest(4, 60, 3600)


def test_origins_run_from_the_end_of_the_warmup_to_the_last_full_horizon() -> None:
    plan = plan_backtest(20, 600, 900, warmup_steps=6)
    assert plan.horizon_steps == 2
    assert plan.origins == range(5, 18)  # origin 17 + 2 steps = 19, the last row


def test_mase_on_a_hand_computed_series() -> None:
    # warm-up 1, 2, 4, 7: one-step naive errors 1, 2, 3 → scale 2. Origins 3..6, one step ahead.
    # naive errors 4, 5, 6, 7 → MAE 5.5 → MASE 2.75.
    # mean forecasts 3.5, 5, 41/6, 9 against 11, 16, 22, 29 → errors 7.5, 11, 91/6, 20 → MAE 161/12 → MASE 161/24.
    history = hourly([1, 2, 4, 7, 11, 16, 22, 29])
    plan = plan_backtest(len(history), 3600, 3600, warmup_steps=4)
    summary = backtest(Mean(), history, plan).summary()
    assert summary["origins"] == 4 and summary["horizon_steps"] == 1
    assert summary["mase"] == pytest.approx(161 / 24)
    assert summary["mase_scale"] == 2
    assert summary["baselines"]["naive"]["mase"] == pytest.approx(2.75)
    assert summary["baselines"]["seasonal_naive"]["mase"] == pytest.approx(2.75)  # no day in the warm-up → naive
    assert backtest(Last(), history, plan).summary()["mase"] == pytest.approx(2.75)


def test_missing_targets_are_skipped_for_model_and_baselines_alike() -> None:
    history = hourly([1, 2, 4, 7, 11, math.nan, 22, 29])
    summary = backtest(Last(), history, plan_backtest(8, 3600, 3600, warmup_steps=4)).summary()
    # origin 4 targets the gap; origin 5 holds 11 → errors 4, 11, 7 (origin 3, 5, 6) → MAE 22/3, scale 2.
    assert summary["pairs_scored"] == 3
    assert summary["mase"] == pytest.approx(22 / 6)
    assert summary["baselines"]["naive"]["mase"] == pytest.approx(22 / 6)


def test_smape_coverage_and_winkler_by_hand() -> None:
    yhat, actual = np.array([1.0, 0.0]), np.array([3.0, 0.0])
    assert smape(yhat, actual) == pytest.approx(50.0)  # 2·2/4 = 1 and 0/0 = 0 → mean 0.5 → 50 %
    lo, hi = np.array([0.0, 0.0]), np.array([2.0, 2.0])
    assert coverage(lo, hi, np.array([1.0, 3.0])) == 0.5
    assert winkler(lo, hi, np.array([1.0, 3.0])) == pytest.approx((2 + 2 + 20 * 1) / 2)


def test_the_forecaster_never_sees_past_its_origin() -> None:
    history = History(np.arange(30, dtype=float), 60.0, 1000.0)
    plan = plan_backtest(30, 60, 180, warmup_steps=10)
    forecaster = Recording()
    backtest(forecaster, history, plan)
    assert [ts for ts, _ in forecaster.seen] == [1000.0 + 60 * t for t in plan.origins]
    assert [size for _, size in forecaster.seen] == [t + 1 for t in plan.origins]  # not even through .base


def test_refit_every_uses_update_only_when_the_forecaster_has_it() -> None:
    history = History(np.arange(30, dtype=float), 60.0)
    plan = plan_backtest(30, 60, 60, warmup_steps=10)
    plain, updatable = Recording(), Updatable()
    assert backtest(plain, history, plan, refit_every=5).forecasts.refits == len(plan.origins)
    result = backtest(updatable, history, plan, refit_every=5)
    assert result.forecasts.refits == math.ceil(len(plan.origins) / 5)
    assert updatable.updates == len(plan.origins) - result.forecasts.refits


def test_failed_origins_are_counted_and_left_out_for_every_forecast() -> None:
    history = History(np.arange(1.0, 31.0), 60.0)
    plan = plan_backtest(30, 60, 60, warmup_steps=10)
    result = backtest(FailsOnOddLengths(), history, plan)
    summary = result.summary()
    assert summary["failed_origins"] == len(plan.origins) // 2
    assert summary["pairs_scored"] == len(plan.origins) - summary["failed_origins"]
    assert np.isnan(result.forecasts.yhat).sum() == summary["failed_origins"]


def test_the_outputs_have_the_contract_columns_and_keys(tmp_path: Path) -> None:
    history = History(np.sin(np.arange(40) / 3) + 5, 600.0)
    labels = [str(600 * i) for i in range(40)]
    plan = plan_backtest(40, 600, 900, warmup_steps=10)
    summary = write_outputs(backtest(Last(), history, plan), labels, tmp_path, {"runtime_s": 0.1})
    with (tmp_path / "forecasts.csv").open(newline="") as handle:
        rows = list(csv.reader(handle))
    assert tuple(rows[0]) == FORECAST_COLUMNS == ("origin", "step", "target", "actual", "yhat", "lo", "hi")
    assert len(rows) - 1 == len(plan.origins) * 2
    assert rows[1][:3] == ["5400", "1", "6000"] and rows[2][:3] == ["5400", "2", "6600"]  # origin + step × 600 s
    for origin, step, target, actual, *_forecast in rows[1:]:
        assert int(target) == int(origin) + int(step) * 600
        assert float(actual) == history.values[int(target) // 600]  # exactly the input's value
    written = json.loads((tmp_path / "summary.json").read_text())
    assert written == summary and written.keys() >= SUMMARY_KEYS
    assert written["baselines"].keys() == {"naive", "seasonal_naive"}
    assert all(scores.keys() == {"mase", "smape"} for scores in written["baselines"].values())
    assert written["coverage90"] is not None and written["runtime_s"] == 0.1
    page = (tmp_path / "report.html").read_text()
    assert "<svg" in page and "polygon" in page and "http" not in page.replace("http://www.w3.org/2000/svg", "")


@pytest.fixture
def registry(monkeypatch: pytest.MonkeyPatch) -> None:
    """A stand-in for ``predictor.registry`` with the two test forecasters."""
    fake = types.ModuleType("predictor.registry")
    makers = {"naive": Last, "mean": Mean}
    fake.FORECASTER_NAMES = tuple(makers)  # type: ignore[attr-defined]
    fake.make_forecaster = lambda name, seed=0: makers[name]()  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "predictor.registry", fake)


def series_csv(tmp_path: Path, size: int = 60) -> Path:
    path = tmp_path / "series.csv"
    rows = [f"2024-01-01T00:{i:02d}:00Z,{100 + 10 * math.sin(i / 5):.3f}" for i in range(size) if i != 40]
    path.write_text("timestamp,value\n" + "\n".join(rows) + "\n")
    return path


@pytest.mark.usefixtures("registry")
def test_the_cli_writes_the_three_outputs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out"
    assert main(["backtest", str(series_csv(tmp_path)), "--horizon", "15m", "--out", str(out), "--model", "mean"]) == 0
    assert {p.name for p in out.iterdir()} == {"forecasts.csv", "summary.json", "report.html"}
    summary = json.loads((out / "summary.json").read_text())
    assert summary.keys() >= SUMMARY_KEYS
    assert (summary["model"], summary["horizon_steps"], summary["warmup_steps"]) == ("mean", 15, 30)
    assert summary["origins"] == 60 - 15 - 30 + 1
    printed = capsys.readouterr().out.splitlines()
    assert printed[0].startswith("mean on series.csv, 15 min ahead (15 steps of 1 min), 16 origins in ")
    mase = f"{summary['mase']:.3f}"
    assert printed[1].startswith(f"  MASE {mase} (mean error ÷ the naive one-step error: under 1 beats repeating")
    assert "90 % band covering" in printed[2] and printed[3].endswith("report.html, summary.json and forecasts.csv")
    assert summary["series"] == "series.csv"
    page = (out / "report.html").read_text()
    assert "Backtest of mean on series.csv: 15 min ahead (15 steps of 1 min), 16 origins" in page
    assert "time (UTC)" in page and "value per step" in page
    assert "<details><summary>summary.json</summary>" in page  # the JSON collapsed under the charts
    assert not re.search(r">-?\d(\.\d+)?e[+-]\d+<", page)  # no 1e+05 ticks


def test_numbers_and_durations_read_as_people_write_them() -> None:
    assert [human_number(v) for v in (477_900.0, 2.781153830294905, -0.5, 1.2e6, 0.0)] == [
        "478k",
        "2.78",
        "-0.5",
        "1.2M",
        "0",
    ]
    assert [duration_words(s) for s in (600.0, 900.0, 30.0, 7200.0, 86400.0, 90.0)] == [
        "10 min",
        "15 min",
        "30 s",
        "2 h",
        "1 d",
        "1.5 min",
    ]


@pytest.mark.usefixtures("registry")
def test_the_cli_forecasts_name_their_target_step_in_the_input_style_with_its_actual(tmp_path: Path) -> None:
    series = series_csv(tmp_path)
    observed = dict(line.split(",") for line in series.read_text().splitlines()[1:])
    out = tmp_path / "out"
    assert main(["backtest", str(series), "--horizon", "15m", "--out", str(out), "--model", "mean"]) == 0
    with (out / "forecasts.csv").open(newline="") as handle:
        rows = list(csv.DictReader(handle))
    for row in rows:
        origin = datetime.fromisoformat(row["origin"])
        assert row["target"] == (origin + timedelta(minutes=int(row["step"]))).isoformat().replace("+00:00", "Z")
        if row["target"] in observed:
            assert float(row["actual"]) == float(observed[row["target"]])
        else:
            assert row["actual"] == ""  # minute 40 is missing from the input
    assert "" in {row["actual"] for row in rows}


@pytest.mark.usefixtures("registry")
def test_the_cli_defaults_to_naive_without_an_ensemble(tmp_path: Path) -> None:
    out = tmp_path / "out"
    assert main(["backtest", str(series_csv(tmp_path)), "--out", str(out)]) == 0
    assert json.loads((out / "summary.json").read_text())["model"] == "naive"


@pytest.mark.usefixtures("registry")
@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--model", "oracle"], "known models: naive, mean"),
        (["--warmup", "31"], "exceeds half"),
        (["--horizon", "soon"], "duration"),
    ],
)
def test_the_cli_refuses_bad_requests_with_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], extra: list[str], message: str
) -> None:
    assert main(["backtest", str(series_csv(tmp_path)), "--out", str(tmp_path / "out"), *extra]) == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


@pytest.mark.usefixtures("registry")
def test_the_cli_names_the_bad_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "bad.csv"
    path.write_text("timestamp,value\n0,1\n60,oops\n")
    assert main(["backtest", str(path), "--out", str(tmp_path / "out")]) == 2
    assert "bad.csv:3:" in capsys.readouterr().err


def test_the_help_lists_backtest(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["--help"])
    assert "backtest" in capsys.readouterr().out.split("commands:")[1]


def test_progress_is_reported_once_per_origin() -> None:
    plan = plan_backtest(30, 60, 60, warmup_steps=10)
    calls: list[tuple[int, int]] = []
    backtest(Last(), History(np.arange(30.0), 60.0), plan, on_progress=lambda done, total: calls.append((done, total)))
    assert calls == [(i + 1, len(plan.origins)) for i in range(len(plan.origins))]


def test_the_naive_baseline_is_scored_with_its_own_empirical_interval() -> None:
    # A ramp of +1 a step: every k-step naive residual is k, so the naive band [y, y + k] covers every target.
    history = History(np.arange(40.0), 60.0)
    summary = backtest(Last(), history, plan_backtest(40, 60, 120, warmup_steps=10)).summary()
    naive = summary["baseline_intervals"]["naive"]
    assert naive["coverage90"] == 1.0
    assert naive["winkler90"] == pytest.approx(1.5)  # widths 1 and 2, nothing outside


def test_saturation_alarms_are_scored_against_crossings_of_the_90th_percentile() -> None:
    # 0..39 with a ±1 band: threshold = 90th percentile = 35.1. Origins 9..37, horizon 2.
    history = History(np.arange(40.0), 60.0)
    saturation = backtest(Last(), history, plan_backtest(40, 60, 120, warmup_steps=10)).summary()["saturation"]
    assert saturation["threshold"] == pytest.approx(35.1)
    assert saturation["origins"] == 29 and saturation["events"] == 4  # origins 34..37 see 36 or more
    assert saturation["naive"] == {"precision": 1.0, "recall": 0.5, "f1": pytest.approx(2 / 3)}  # 36 and 37 over
    # The model (last value ± 1): at origin 35 each step has P 0.44 of topping 35.1, the two together 0.55 → an
    # alarm one origin before naive's; at origin 34 (P 0.04 a step) none.
    assert saturation["model"]["recall"] == 0.75 and saturation["model"]["precision"] == 1.0
    curve = saturation["model"]["pr_curve"]
    assert [c["cutoff"] for c in curve][:2] == [0.05, 0.1] and len(curve) == 19
    assert curve[0]["recall"] >= curve[-1]["recall"]  # a lower cut-off never catches fewer events
    assert saturation["model"]["average_precision"] == 1.0  # the higher the probability, the nearer the crossing


def test_average_precision_and_alarm_scores_by_hand() -> None:
    from predictor.alarm_scores import alarm_score, average_precision

    events = np.array([True, True, False, False])
    assert average_precision(np.array([0.9, 0.8, 0.2, 0.1]), events) == 1.0
    assert average_precision(np.array([0.1, 0.2, 0.8, 0.9]), events) == pytest.approx((1 / 3 + 2 / 4) / 2)
    assert average_precision(np.array([0.5, 0.5, 0.5, 0.5]), events) == 0.5  # one cut-off: everything alarms
    assert average_precision(np.zeros(4), np.zeros(4, dtype=bool)) is None
    alarms = np.array([True, False, True, False])
    assert alarm_score(alarms, events) == {"precision": 0.5, "recall": 0.5, "f1": 0.5}
    assert alarm_score(np.zeros(4, dtype=bool), events) == {"precision": None, "recall": 0.0, "f1": None}


def test_a_2016_row_backtest_of_the_default_model_is_well_within_a_minute() -> None:
    import time

    from predictor.cycle import DEFAULT_MODEL
    from predictor.registry import make_forecaster

    rng = np.random.default_rng(5)
    history = History(1000 + np.cumsum(rng.normal(0, 10, 2016)), 600.0)
    started = time.process_time()  # CPU, not wall: the suite's other workers share the cores
    summary = backtest(make_forecaster(DEFAULT_MODEL), history, plan_backtest(2016, 600, 900)).summary()
    assert time.process_time() - started < 30
    assert summary["origins"] == 1727 and summary["failed_origins"] == 0
    assert 0.8 <= summary["coverage90"] <= 0.97

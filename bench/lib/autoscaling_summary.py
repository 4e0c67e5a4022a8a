"""``bench.autoscaling``'s figures from every series' runs: the table, the startup sweep, the forecasts' scores, and
the issue's targets, as medians and 10th/90th percentiles over the series.

Per series and row (forecaster × policy), at the policy's default attainment target:

- ``ratio``: its replica-hours over the reactive HPA's front at the attainment it reached (:func:`bench.lib.fronts.
  matched`: where the HPA never reaches it, both fronts where the HPA's ends);
- ``gain``: (reactive − it) / (reactive − the same policy fed the true future), at that attainment;
- ``oracle``: its replica-hours over the oracle's; ``rate_oracle``: over the rate-oracle's front at the same
  attainment (the ServeGen minute series);
- ``attainment`` and whether it reached its target.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from bench.lib.autoscaling_runs import DEFAULT_STARTUP_S, SeriesRuns, StartupRuns
from bench.lib.fronts import Point, gain_share, matched
from fleet.pools import DEFAULT_SLO_ATTAINMENT

TARGET = DEFAULT_SLO_ATTAINMENT
HEADLINE = ("predictive", "auto")
TARGET_RATIO_MEDIAN = 0.85
TARGET_RATIO_P90 = 0.95
TARGET_RATE_ORACLE = 1.3
TARGET_GAIN = 0.5
COVERAGE_TOLERANCE = 0.02
COVERAGE_SHARE = 0.8
TARGET_MASE = 0.9
TARGET_F1_GAIN = 0.05
TARGET_RECALL = 0.75


@dataclass(frozen=True)
class RowFigures:
    """One row's figures on one series (None where they cannot be read)."""

    attainment: float
    ratio: float | None
    gain: float | None
    oracle: float
    rate_oracle: float | None


def row_figures(runs: StartupRuns, run: Point, front: Sequence[Point], rate: Sequence[Point] | None) -> RowFigures:
    m = matched(run, front, runs.reactive)
    gain = None
    if m is not None:
        gain = gain_share(m.baseline_replica_hours, m.replica_hours, runs.foresight.replica_hours)
    rate_ratio = None
    if rate:
        r = matched(run, front, rate)
        rate_ratio = None if r is None else r.ratio
    return RowFigures(
        run.attainment, None if m is None else m.ratio, gain, run.replica_hours / runs.oracle.replica_hours, rate_ratio
    )


def rows_of(runs: StartupRuns) -> dict[tuple[str, str], tuple[Point, list[Point]]]:
    """(policy, forecaster) → (the default run, its front)."""
    out = {}
    for name, by_target in runs.predictive.items():
        out[("predictive", name)] = (by_target[TARGET], list(by_target.values()))
    if runs.hybrid:
        out[("hybrid", "auto")] = (runs.hybrid[TARGET], list(runs.hybrid.values()))
    return out


def spread(values: Iterable[float | None]) -> dict[str, float | int | None]:
    """Median, 10th and 90th percentile of the values that are not None, and how many there were."""
    found = [v for v in values if v is not None and math.isfinite(v)]
    if not found:
        return {"median": None, "p10": None, "p90": None, "n": 0}
    q = np.quantile(found, [0.5, 0.1, 0.9])
    return {
        "median": round(float(q[0]), 4),
        "p10": round(float(q[1]), 4),
        "p90": round(float(q[2]), 4),
        "n": len(found),
    }


def table(runs: Sequence[SeriesRuns], startup: float) -> dict[str, dict[str, Any]]:
    """Every row's spreads over the series run at ``startup``."""
    per_row: dict[tuple[str, str], list[RowFigures]] = {}
    for series in runs:
        at = series.by_startup.get(startup)
        if at is None:
            continue
        for key, (run, front) in rows_of(at).items():
            per_row.setdefault(key, []).append(row_figures(at, run, front, series.rate_oracle))
    out = {}
    for (policy, name), figures in sorted(per_row.items()):
        out[f"{policy}×{name}"] = {
            "series": len(figures),
            "ratio": spread(f.ratio for f in figures),
            "ratio_at_most_0_85": share(f.ratio is not None and f.ratio <= TARGET_RATIO_MEDIAN for f in figures),
            "gain": spread(f.gain for f in figures),
            "oracle": spread(f.oracle for f in figures),
            "rate_oracle": spread(f.rate_oracle for f in figures),
            "attainment": spread(f.attainment for f in figures),
            "reached_target": share(f.attainment >= TARGET - 1e-9 for f in figures),
        }
    return out


def share(flags: Iterable[bool]) -> float | None:
    found = list(flags)
    return round(sum(found) / len(found), 4) if found else None


def forecasts(runs: Sequence[SeriesRuns]) -> dict[str, dict[str, Any]]:
    """Per forecaster: how often its quantile at the target was calibrated, its MASE, its saturation alarms."""
    names = sorted({name for s in runs for name in s.quality})
    out = {}
    for name in names:
        scores = [s.quality[name] for s in runs if name in s.quality]
        covered = [q.coverage for q in scores if q.coverage is not None]
        f1 = [(q.saturation.f1, q.naive_saturation.f1) for q in scores if q.events > 0]
        out[name] = {
            "coverage": spread(covered),
            "coverage_within_0_02": share(abs(c - TARGET) <= COVERAGE_TOLERANCE + 1e-12 for c in covered),
            "mase": spread(q.mase for q in scores),
            "saturation_f1": spread(a for a, _ in f1),
            "naive_saturation_f1": spread(b for _, b in f1),
            "saturation_f1_gain": spread(a - b for a, b in f1 if a is not None and b is not None),
            "saturation_recall": spread(q.saturation.recall for q in scores if q.events > 0),
            "seconds_per_series": spread(s.forecast_seconds.get(name) for s in runs),
        }
    return out


def startup_sweep(runs: Sequence[SeriesRuns]) -> dict[str, dict[str, Any]]:
    """auto × predictive at each startup of the sweep: its attainment and its ratio to the HPA's front."""
    startups = sorted({s for series in runs for s in series.by_startup if len(series.by_startup) > 1})
    out = {}
    for startup in startups:
        figures = [
            row_figures(at, *rows_of(at)[HEADLINE], series.rate_oracle)
            for series in runs
            if (at := series.by_startup.get(startup)) is not None and len(series.by_startup) > 1
        ]
        out[f"{startup / 60:g}min"] = {
            "series": len(figures),
            "attainment": spread(f.attainment for f in figures),
            "held_0_99": share(f.attainment >= 0.99 - 1e-9 for f in figures),
            "ratio": spread(f.ratio for f in figures),
            "rate_oracle": spread(f.rate_oracle for f in figures),
        }
    return out


def per_series(runs: Sequence[SeriesRuns]) -> dict[str, dict[str, Any]]:
    """The CONTRACT keys: per series, the better of predictive and hybrid (both with auto) against the HPA's front."""
    better, ratios, oracle, attainment = {}, {}, {}, {}
    for series in runs:
        at = series.by_startup[DEFAULT_STARTUP_S]
        rows = rows_of(at)
        found = {
            policy: row_figures(at, *rows[(policy, "auto")], series.rate_oracle)
            for policy in ("predictive", "hybrid")
            if (policy, "auto") in rows
        }
        reaching = [(f.ratio, p) for p, f in found.items() if f.ratio is not None and f.attainment >= TARGET - 1e-9]
        best = min(reaching)[1] if reaching else None
        better[series.name] = best
        ratios[series.name] = None if best is None else round(found[best].ratio or math.nan, 4)
        oracle[series.name] = None if best is None else round(found[best].oracle, 4)
        attainment[series.name] = {p: round(f.attainment, 4) for p, f in found.items()}
    return {"better": better, "ratio": ratios, "oracle": oracle, "attainment": attainment}


def targets(
    rows: Mapping[str, dict[str, Any]],
    sweep: Mapping[str, dict[str, Any]],
    scores: Mapping[str, dict[str, Any]],
) -> dict[str, bool | None]:
    """The issue's targets, on the headline row (auto × predictive) and its forecasts."""
    head = rows.get("predictive×auto", {})

    def get(block: Mapping[str, object], key: str, stat: str) -> float | None:
        value = block.get(key)
        return value.get(stat) if isinstance(value, dict) else None

    def at_most(value: float | None, bound: float) -> bool | None:
        return None if value is None else value <= bound

    attainment = get(head, "attainment", "median")
    auto = scores.get("auto", {})
    f1_gain, recall = get(auto, "saturation_f1_gain", "median"), get(auto, "saturation_recall", "median")
    coverage_share = auto.get("coverage_within_0_02")
    swept = [block for name, block in sweep.items() if name in ("2min", "5min", "10min")]
    return {
        "median_reaches_target": None if attainment is None else attainment >= TARGET - 1e-9,
        "median_ratio_0_85": at_most(get(head, "ratio", "median"), TARGET_RATIO_MEDIAN),
        "p90_ratio_0_95": at_most(get(head, "ratio", "p90"), TARGET_RATIO_P90),
        "median_rate_oracle_1_3": at_most(get(head, "rate_oracle", "median"), TARGET_RATE_ORACLE),
        "median_gain_0_5": None if (g := get(head, "gain", "median")) is None else g >= TARGET_GAIN,
        "startup_sweep": None
        if not swept
        else all(
            (get(b, "attainment", "median") or 0) >= 0.99
            and (get(b, "ratio", "median") or math.inf) <= TARGET_RATIO_MEDIAN
            for b in swept
        ),
        "coverage_80_percent": None if not isinstance(coverage_share, float) else coverage_share >= COVERAGE_SHARE,
        "mase_0_9": at_most(get(auto, "mase", "median"), TARGET_MASE),
        "saturation_f1": None
        if f1_gain is None or recall is None
        else f1_gain >= TARGET_F1_GAIN and recall >= TARGET_RECALL,
    }


def summarise(runs: Sequence[SeriesRuns], *, source: str, seconds: float) -> dict[str, Any]:
    """The benchmark's last line (CONTRACT section 12 keys first) and, under ``table_text``, the table as text."""
    rows = table(runs, DEFAULT_STARTUP_S)
    sweep = startup_sweep(runs)
    scores = forecasts(runs)
    series = per_series(runs)
    matched_ratios = [r for r in series["ratio"].values() if isinstance(r, float) and math.isfinite(r)]
    return {
        "bench": "autoscaling",
        "series": len(runs),
        "source": source,
        "baseline": "the reactive HPA's front over its target utilization, at the same attainment",
        "ratio": round(float(np.exp(np.mean(np.log(matched_ratios)))), 4) if matched_ratios else None,
        "better_per_series": series["better"],
        "ratio_per_series": series["ratio"],
        "oracle_ratio_per_series": series["oracle"],
        "attainment_per_series": series["attainment"],
        "targets_met": targets(rows, sweep, scores),
        "attainment_target": TARGET,
        "rows": rows,
        "startup_sweep": sweep,
        "forecasts": scores,
        "seconds": round(seconds, 1),
        "detail": detail(runs),
        "table_text": table_text(rows, sweep, scores),
    }


def detail(runs: Sequence[SeriesRuns]) -> dict[str, dict[str, Any]]:
    """Per series: every row's attainment, ratio and oracle ratio at the default startup (for reading one series)."""
    out = {}
    for series in runs:
        at = series.by_startup[DEFAULT_STARTUP_S]
        rows = {}
        for (policy, name), (run, front) in rows_of(at).items():
            f = row_figures(at, run, front, series.rate_oracle)
            rows[f"{policy}×{name}"] = {
                "attainment": round(f.attainment, 4),
                "ratio": None if f.ratio is None else round(f.ratio, 4),
                "oracle": round(f.oracle, 4),
            }
        out[series.name] = {"steps": series.steps, "auto_share_smoothing": series.auto_share_smoothing, "rows": rows}
    return out


def table_text(
    rows: Mapping[str, dict[str, Any]],
    sweep: Mapping[str, dict[str, Any]],
    scores: Mapping[str, dict[str, Any]],
) -> list[str]:
    def cell(block: Mapping[str, object], key: str) -> str:
        value = block.get(key)
        if not isinstance(value, dict) or value.get("median") is None:
            return "—"
        return f"{value['median']:.3f} [{value['p10']:.3f}, {value['p90']:.3f}]"

    lines = ["row | × HPA front (median [p10, p90]) | gain | × rate-oracle | × oracle | attainment | reached"]
    for name, block in rows.items():
        lines.append(
            f"{name} | {cell(block, 'ratio')} | {cell(block, 'gain')} | {cell(block, 'rate_oracle')} | "
            f"{cell(block, 'oracle')} | {cell(block, 'attainment')} | {block.get('reached_target')}"
        )
    for name, block in sweep.items():
        lines.append(f"startup {name}: attainment {cell(block, 'attainment')}, × HPA {cell(block, 'ratio')}")
    for name, block in scores.items():
        lines.append(
            f"forecast {name}: coverage {cell(block, 'coverage')} (within ±0.02: {block.get('coverage_within_0_02')}), "
            f"MASE {cell(block, 'mase')}, F1 {cell(block, 'saturation_f1')} "
            f"vs naive {cell(block, 'naive_saturation_f1')}"
        )
    return lines

"""The fleet health report's rules, pure: the fleet's size class and the checks that matter at that size, each judged
pass / fail / not measured against figures gathered elsewhere, with its trend against an earlier window.

A figure nobody measured is None and its check says *not measured* with the reason, never a made-up pass. The
targets are the ones operators of inference fleets steer by:

- GPU memory use ≥ 85 %: memory runs out before compute, so memory left idle is the first waste to see.
- KV-cache peak ≤ 90 %: past it an engine preempts or swaps sequences and latency jumps.
- KV fragmentation < 10 %: allocated KV slots left empty are memory no request can use.
- GPU utilization ≥ 75 %: below it the fleet is paying for idle accelerators.
- p99 latency within every pool's SLO (worst p99 / SLO ≤ 1).
- load spread between nodes < 5 %: the coefficient of variation of per-node utilization (0.52, 0.50, 0.48 → 3.3 %).
- scale-up no slower than planned: a replica ready within the pool's ``startup_seconds`` (1.4× planned fails).
- failover within 60 s; forecast accuracy better than the naive forecast (MASE < 1).
"""

from __future__ import annotations

import math
import operator
import statistics
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import IntEnum, StrEnum

from collector.series import WindowStats


class SizeClass(IntEnum):
    NO_GPUS = 0
    SMALL = 1  # 1–8 GPUs
    MEDIUM = 2  # 9–64 GPUs
    LARGE = 3  # 65+ GPUs

    @property
    def label(self) -> str:
        return {0: "no GPUs reported", 1: "1–8 GPUs", 2: "8–64 GPUs", 3: "64+ GPUs"}[self.value]


def size_class(gpus: int) -> SizeClass:
    if gpus <= 0:
        return SizeClass.NO_GPUS
    if gpus <= 8:
        return SizeClass.SMALL
    return SizeClass.MEDIUM if gpus <= 64 else SizeClass.LARGE


class Verdict(StrEnum):
    PASS = "pass"
    FAIL = "fail"
    NOT_MEASURED = "not measured"


class Trend(StrEnum):
    BETTER = "better"
    WORSE = "worse"
    STEADY = "steady"
    UNKNOWN = "no earlier figure"


@dataclass(frozen=True)
class FleetFigures:
    """What the checks read; each None is not measured, and ``notes`` may say why or add context."""

    gpu_memory_use_ratio: float | None = None
    kv_cache_peak_ratio: float | None = None
    kv_fragmentation_ratio: float | None = None
    gpu_utilization_ratio: float | None = None
    latency_p99_over_slo: float | None = None
    load_spread_ratio: float | None = None
    scale_up_over_planned: float | None = None
    failover_seconds: float | None = None
    forecast_mase: float | None = None
    notes: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Check:
    figure: str  # a FleetFigures field
    title: str
    unit: str  # "ratio", "times" or "seconds": how the figure is shown
    holds: Callable[[float, float], bool]
    target: float
    target_text: str
    higher_is_better: bool
    matters_from: SizeClass


CHECKS: tuple[Check, ...] = (
    Check("gpu_memory_use_ratio", "GPU memory use", "ratio", operator.ge, 0.85, "≥ 85 %", True, SizeClass.SMALL),
    Check("kv_cache_peak_ratio", "KV-cache use (peak)", "ratio", operator.le, 0.90, "≤ 90 %", False, SizeClass.SMALL),
    Check("gpu_utilization_ratio", "GPU utilization", "ratio", operator.ge, 0.75, "≥ 75 %", True, SizeClass.SMALL),
    Check("latency_p99_over_slo", "p99 latency / SLO", "times", operator.le, 1.0, "≤ 1× SLO", False, SizeClass.SMALL),
    Check("kv_fragmentation_ratio", "KV fragmentation", "ratio", operator.lt, 0.10, "< 10 %", False, SizeClass.MEDIUM),
    Check(
        "load_spread_ratio", "Load spread between nodes", "ratio", operator.lt, 0.05, "< 5 %", False, SizeClass.MEDIUM
    ),
    Check(
        "scale_up_over_planned",
        "Scale-up time / planned",
        "times",
        operator.le,
        1.0,
        "≤ 1× startup",
        False,
        SizeClass.MEDIUM,
    ),
    Check("failover_seconds", "Failover time", "seconds", operator.le, 60.0, "≤ 60 s", False, SizeClass.LARGE),
    Check(
        "forecast_mase",
        "Forecast accuracy (MASE)",
        "times",
        operator.lt,
        1.0,
        "< 1 (beats naive)",
        False,
        SizeClass.LARGE,
    ),
)
STEADY_SHARE = 0.02  # a change under 2 % of the target is steady


@dataclass(frozen=True)
class CheckResult:
    check: Check
    verdict: Verdict
    value: float | None
    previous: float | None
    trend: Trend
    note: str


def trend(check: Check, value: float | None, previous: float | None) -> Trend:
    if value is None or previous is None:
        return Trend.UNKNOWN
    delta = value - previous
    if abs(delta) <= STEADY_SHARE * abs(check.target):
        return Trend.STEADY
    return Trend.BETTER if (delta > 0) == check.higher_is_better else Trend.WORSE


def evaluate(check: Check, now: FleetFigures, before: FleetFigures | None = None) -> CheckResult:
    value: float | None = getattr(now, check.figure)
    previous: float | None = getattr(before, check.figure) if before is not None else None
    note = now.notes.get(check.figure, "")
    if value is None:
        return CheckResult(check, Verdict.NOT_MEASURED, None, previous, Trend.UNKNOWN, note)
    verdict = Verdict.PASS if check.holds(value, check.target) else Verdict.FAIL
    return CheckResult(check, verdict, value, previous, trend(check, value, previous), note)


@dataclass(frozen=True)
class HealthReport:
    gpus: int
    size: SizeClass
    results: tuple[CheckResult, ...]  # the checks that matter at this size
    later: tuple[Check, ...]  # the checks that matter once the fleet grows


def report(gpus: int, now: FleetFigures, before: FleetFigures | None = None) -> HealthReport:
    """The checks that matter at the fleet's size (a fleet without GPUs is judged like a small one)."""
    size = size_class(gpus)
    effective = max(size, SizeClass.SMALL)
    results = tuple(evaluate(c, now, before) for c in CHECKS if c.matters_from <= effective)
    return HealthReport(gpus, size, results, tuple(c for c in CHECKS if c.matters_from > effective))


def coefficient_of_variation(values: Sequence[float]) -> float | None:
    """Population std / mean; None for fewer than two values or a zero mean (nothing to spread)."""
    if len(values) < 2:
        return None
    mean = statistics.fmean(values)
    return None if mean == 0 else statistics.pstdev(values) / mean


def figures_from_window(
    stats: Sequence[WindowStats],
    memory_total_bytes: Mapping[tuple[str, int], int],
    slo_p99_seconds: Mapping[str, float],
) -> FleetFigures:
    """The window-based figures from each series' mean and peak over the window (rollups): memory use as the fleet's
    used bytes over the total of the GPUs that reported, utilization as the mean over GPUs, the KV peak as the max
    over replica sets, p99 as the worst pool's peak p99 over its SLO, load spread over nodes' mean utilization."""
    used = total = 0.0
    utilization: list[float] = []
    per_node: dict[str, list[float]] = defaultdict(list)
    kv_peaks: list[float] = []
    slo_ratios: list[float] = []
    for s in stats:
        if s.device is not None and "gpu_memory_used_bytes" in s.mean and memory_total_bytes.get((s.node_id, s.device)):
            used += s.mean["gpu_memory_used_bytes"]
            total += memory_total_bytes[(s.node_id, s.device)]
        if s.device is not None and "gpu_utilization_ratio" in s.mean:
            utilization.append(s.mean["gpu_utilization_ratio"])
            per_node[s.node_id].append(s.mean["gpu_utilization_ratio"])
        if "kv_cache_utilization_ratio" in s.peak:
            kv_peaks.append(s.peak["kv_cache_utilization_ratio"])
        slo = slo_p99_seconds.get(s.pool or "")
        if slo and "request_latency_p99_seconds" in s.peak:
            slo_ratios.append(s.peak["request_latency_p99_seconds"] / slo)
    node_means = [statistics.fmean(v) for v in per_node.values()]
    return FleetFigures(
        gpu_memory_use_ratio=used / total if total > 0 else None,
        gpu_utilization_ratio=statistics.fmean(utilization) if utilization else None,
        kv_cache_peak_ratio=max(kv_peaks) if kv_peaks else None,
        latency_p99_over_slo=max(slo_ratios) if slo_ratios else None,
        load_spread_ratio=coefficient_of_variation(node_means),
    )


def scale_up_seconds(event_ts: float, target: int, history: Sequence[tuple[float, int, int]]) -> float | None:
    """Seconds from a scale-up decided at ``event_ts`` until ``target`` replicas were ready, from a pool's
    (bucket start, ready, starting) history; None while it has not got there within the history."""
    for ts, ready, _starting in history:
        if ts >= event_ts and ready >= target:
            return max(0.0, ts - event_ts)
    return None


def failover_seconds(failovers: Sequence[tuple[float, float | None]], now: float) -> float | None:
    """The worst detection → ready of (detected_at, ready_at) failovers; one not ready yet counts as open so far
    (detected 40 s ago, not ready: 40 s, and growing). None when there was none."""
    return worst([(ready if ready is not None else now) - detected for detected, ready in failovers])


def worst(values: Sequence[float]) -> float | None:
    finite = [v for v in values if math.isfinite(v)]
    return max(finite) if finite else None

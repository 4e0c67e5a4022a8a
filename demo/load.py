"""What the demo plays into its chat pool, pure: a day of real demand compressed into five minutes and the hours
before it (the history ``demo.history`` seeds). globex's noisy-neighbour burst comes on top, sized as it runs
(``demo.burst``, ``demo.episode``).

The day's shape is ServeGen's ``m-small`` requests per 10 minutes (``data/traces/series``, Apache-2.0, Xiang et al.,
"ServeGen", arXiv 2505.09999) from 16:00 of its first day to 16:00 of the next: an evening peak at 21:00, a night, a
morning. Its amplitude is scaled to the chat pool (3..4 replicas of half a request/s): the peak is above what the
minimum carries, everything else below it, so chat scales up in the evening and down in the night. The requests'
sizes are the Azure LLM conv trace's (``replay.trace_load``). ``replay.driver`` sends the plan.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from predictor.series_csv import read_series_csv
from replay.driver import PlannedRequest, ReplayOptions, arrivals_from_series, schedule
from replay.trace_load import AZURE_CONV_SLICE, TraceRequest, load_trace

DAY_TRACE = AZURE_CONV_SLICE.parent / "series" / "servegen_m-small_requests_per_10min.csv"
DAY_START_STEP = 96  # 16:00 of the trace's first day, in its 10-minute steps
DAY_STEPS = 144  # 24 hours
HISTORY_STEPS = 36  # the six hours before the day: 10:00 to 16:00
TIME_SCALE = 288.0  # trace seconds per demo second: the day in 5 minutes, one trace hour every 12.5 s
# The day's peak (21:00) as chat demand: above 1.155 requests/s, where 3 replicas of 0.5 request/s pass the HPA
# target 0.7 and its tolerance (3 × 0.35 × 1.1), from about 19:20 to 23:30 (0:42 to 1:34 of the demo); the night
# and the next morning (at most 660 of the peak's 1163 thousand requests, 0.94 requests/s) stay under the
# 1.05 requests/s 3 replicas carry at 0.7.
CHAT_PEAK_RPS = 1.65
TENANTS = ("acme", "globex")  # the day's requests alternate between the two tenants


@dataclass(frozen=True)
class CompressedDay:
    """The chat pool's demand in requests/s, one value per trace step (``trace_step_s`` of trace time, played in
    ``step_s`` = trace_step_s / time_scale): the day, and the hours before it that are seeded as history."""

    day_rps: tuple[float, ...]
    history_rps: tuple[float, ...]
    trace_step_s: float
    time_scale: float

    @property
    def step_s(self) -> float:
        return self.trace_step_s / self.time_scale

    @property
    def lap_s(self) -> float:
        """How long the day lasts in the demo: 144 steps of 600 s at 288× → 300 s."""
        return len(self.day_rps) * self.step_s

    def history_per_minute(self) -> list[float]:
        """The history on a 1-minute grid, linear between the trace's steps (the last leading into the day's first
        value): 36 ten-minute steps → 360 minutes."""
        steps = [*self.history_rps, self.day_rps[0]]
        per_step = round(self.trace_step_s / 60.0)
        return list(np.interp(np.arange(len(self.history_rps) * per_step) / per_step, range(len(steps)), steps))

    def crossings(self, up_rps: float, down_rps: float) -> tuple[float, float]:
        """Seconds into the day when demand first rises past ``up_rps``, and when it then falls to ``down_rps`` or
        below; ValueError when the day does either never."""
        up = next((i for i, v in enumerate(self.day_rps) if v > up_rps), None)
        if up is None:
            raise ValueError(f"the day never rises past {up_rps:g} requests/s")
        down = next((i for i in range(up, len(self.day_rps)) if self.day_rps[i] <= down_rps), None)
        if down is None:
            raise ValueError(f"the day never falls back to {down_rps:g} requests/s")
        return up * self.step_s, down * self.step_s


def compressed_day(
    path: Path = DAY_TRACE,
    *,
    start_step: int = DAY_START_STEP,
    day_steps: int = DAY_STEPS,
    history_steps: int = HISTORY_STEPS,
    time_scale: float = TIME_SCALE,
    peak_rps: float = CHAT_PEAK_RPS,
) -> CompressedDay:
    """The trace's steps [start − history, start + day), scaled so the day's highest step is ``peak_rps``."""
    history = read_series_csv(path).history
    first = start_step - history_steps
    if first < 0 or start_step + day_steps > len(history.values):
        raise ValueError(f"{path}: steps {first}..{start_step + day_steps} are not all in the trace")
    window = [float(v) for v in history.values[first : start_step + day_steps]]
    if any(math.isnan(v) for v in window):
        raise ValueError(f"{path}: a step in {first}..{start_step + day_steps} has no value")
    scale = peak_rps / max(window[history_steps:])
    rps = [v * scale for v in window]
    return CompressedDay(tuple(rps[history_steps:]), tuple(rps[:history_steps]), history.step_seconds, time_scale)


def day_plan(
    day: CompressedDay,
    servers: Sequence[str],
    *,
    laps: int,
    sizes: Sequence[TraceRequest] | None = None,
) -> list[PlannedRequest]:
    """``laps`` days one after the other, in time order: the requests alternate between the tenants and go
    round-robin over ``servers``; prompt sizes and generated tokens are the Azure conv trace's, in turn (``sizes``).
    globex's burst is not planned: it is sized as it runs (``demo.episode``)."""
    sizes = sizes or request_sizes()
    counts = [rps * day.step_s for rps in day.day_rps] * laps
    days = [
        TraceRequest(a.arrival_s, size.prompt_tokens, size.generated_tokens)
        for a, size in zip(arrivals_from_series(counts, day.step_s, 0, 0), itertools.cycle(sizes))
    ]
    return schedule(days, ReplayOptions(servers=tuple(servers), pool="chat", tenants=TENANTS))


def request_sizes() -> list[TraceRequest]:
    """The Azure conv trace's first 600 requests: the sizes the day's and the burst's requests take in turn."""
    return load_trace(AZURE_CONV_SLICE, limit=600, compression=1.0)

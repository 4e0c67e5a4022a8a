"""The demand corpus of ``bench.autoscaling`` and of the forecaster's prior: hundreds of series from the trace set,
split once into a tune half and a report half.

From ServeGen's per-client windows (:mod:`bench.lib.servegen`), per model (m-large, m-small, mm-image):

- the clients are split once, by ``SPLIT_SEED``, into two halves: ``tune`` (every default is chosen there, and the
  prior trained there) and ``report`` (every figure is reported there);
- each half gives **single** series (one client alone, when it had requests in at least ``ACTIVE_SHARE`` of the
  windows: a client idle most of the time is a burst now and then, not a pool to scale), **agg5** and **agg20**
  (``AGGREGATES`` random sums of 5 and 20 of the half's clients, when it has more than that many) and **all** (the
  half's sum);
- each series at **10 minutes** (the windows' rates, 14 days; a window with no request from any client of the model
  is a collection gap, NaN) and at **1 minute** (``MINUTE_DAYS`` days of arrivals drawn as ServeGen's generator
  draws them, :func:`bench.lib.servegen.minute_counts`, with the rate the arrivals were drawn at kept beside them,
  what the rate-oracle knows).

The Azure LLM inference trace 2023 gives the short series: requests and output tokens per minute of ``code`` (tune)
and ``conv`` (report), about an hour each. Demand is in requests (or tokens) per second.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

import numpy as np

from bench.lib import servegen
from bench.lib.servegen import ClientWindows, FloatArray, IntArray
from predictor.base import History
from predictor.series_csv import read_series_csv

SPLIT_SEED = 20_261_207
ACTIVE_SHARE = 0.5
AGGREGATES = 8  # of 5 clients, per half and model; of 20: half as many
MINUTE_DAYS = 3
DAY_S = 86_400.0
AZURE = Path(__file__).resolve().parents[2] / "data" / "traces" / "series"
AZURE_SERIES = {
    "tune": ("azure_code_requests_per_minute", "azure_code_output_tokens_per_minute"),
    "report": ("azure_conv_requests_per_minute", "azure_conv_output_tokens_per_minute"),
}


class Half(StrEnum):
    TUNE = "tune"
    REPORT = "report"


@dataclass(frozen=True)
class CorpusSeries:
    """One demand series: where it comes from (model, kind, the clients summed), its half and its values."""

    name: str
    model: str
    kind: str  # single, agg5, agg20, all, azure
    half: Half
    clients: tuple[int, ...]
    history: History
    windows: ClientWindows | None = None  # the clients' windows (ServeGen series): tenants, rates, replicates

    @property
    def minute_level(self) -> bool:
        """A minute series derived from ServeGen: its rate and its other draws are known."""
        return self.history.step_seconds == servegen.MINUTE_S and self.windows is not None

    def members(self) -> tuple[History, ...]:
        """Each client's own demand at this series' step (its window rates, or its own arrivals per minute, the
        ones summed here), gaps where the series has them: the tenants of an aggregate."""
        if self.windows is None or len(self.clients) < 2:
            return ()
        gaps = ~np.isfinite(self.history.values)
        out = []
        for row in self.windows.rows(self.clients):
            if self.minute_level:
                own = servegen.minute_counts(self.windows, row, 0, len(self.history) // 10, 0) / servegen.MINUTE_S
            else:
                own = self.windows.rate[row, : len(self.history)]
            out.append(History(np.where(gaps, np.nan, own), self.history.step_seconds, self.history.start_ts))
        return tuple(out)

    def rate(self) -> FloatArray:
        """A minute series' true rate per minute (req/s): the sum of its clients' window rates."""
        if self.windows is None:
            raise ValueError(f"{self.name}: only a minute series derived from ServeGen has a known rate")
        rows = self.windows.rows(self.clients)
        per_window = self.windows.rate[rows, : len(self.history) // servegen.MINUTES_PER_WINDOW].sum(axis=0)
        rate: FloatArray = np.repeat(per_window, servegen.MINUTES_PER_WINDOW)
        return rate

    def replicates(self, count: int) -> IntArray:
        """``count`` other draws of the minute series' arrivals (count × minutes, requests per minute): the same
        rates and shapes, other seeds; the series itself is draw 0."""
        if self.windows is None:
            raise ValueError(f"{self.name}: only a minute series derived from ServeGen has replicates")
        return np.stack([self._counts(seed) for seed in range(1, count + 1)])

    def _counts(self, seed: int) -> IntArray:
        assert self.windows is not None
        windows = len(self.history) // servegen.MINUTES_PER_WINDOW
        rows = self.windows.rows(self.clients)
        counts: IntArray = sum(
            (servegen.minute_counts(self.windows, row, 0, windows, seed) for row in rows),
            np.zeros(windows * servegen.MINUTES_PER_WINDOW, dtype=np.int64),
        )
        return counts


def split(clients: tuple[int, ...], model: str) -> dict[Half, tuple[int, ...]]:
    """The model's clients in two halves, by a fixed seed (the tune half gets the smaller one when odd)."""
    order = np.random.default_rng([SPLIT_SEED, servegen.MODELS.index(model)]).permutation(len(clients))
    shuffled = [clients[i] for i in order]
    middle = len(shuffled) // 2
    return {Half.TUNE: tuple(sorted(shuffled[:middle])), Half.REPORT: tuple(sorted(shuffled[middle:]))}


def build(half: Half, *, minute: bool = True, ten_minute: bool = True) -> list[CorpusSeries]:
    """Every series of ``half`` (see the module docstring), 10-minute ones first."""
    out: list[CorpusSeries] = []
    groups: list[tuple[ClientWindows, str, str, tuple[int, ...]]] = []
    for model in servegen.MODELS:
        windows = servegen.load(model)
        groups.extend((windows, *group) for group in _groups(windows, split(windows.clients, model)[half], model))
    if ten_minute:
        out.extend(_ten_minute(windows, kind, label, clients, half) for windows, kind, label, clients in groups)
        out.extend(_azure(half))
    if minute:
        out.extend(_minute(windows, kind, label, clients, half) for windows, kind, label, clients in groups)
    return out


def _groups(windows: ClientWindows, clients: tuple[int, ...], model: str) -> Iterator[tuple[str, str, tuple[int, ...]]]:
    """(kind, label, clients) of one half of one model: the singles active enough, the random aggregates, all."""
    rows = windows.rows(clients)
    active = (windows.rate[rows] > 0).mean(axis=1)
    for client, share in zip(clients, active, strict=True):
        if share >= ACTIVE_SHARE:
            yield "single", f"client{client}", (client,)
    rng = np.random.default_rng([SPLIT_SEED, servegen.MODELS.index(model), len(clients)])
    for size, count in ((5, AGGREGATES), (20, AGGREGATES // 2)):
        if len(clients) >= 2 * size:  # fewer, and the aggregates would be near-copies of one another
            for k in range(count):
                chosen = tuple(sorted(int(c) for c in rng.choice(clients, size, replace=False)))
                yield f"agg{size}", f"agg{size}-{k}", chosen
    yield "all", "all", clients


def _gaps(windows: ClientWindows) -> np.ndarray:
    """Windows where no client of the model had a request: a collection gap, not idle time."""
    gaps: np.ndarray = windows.rate.sum(axis=0) == 0
    return gaps


def _ten_minute(windows: ClientWindows, kind: str, label: str, clients: tuple[int, ...], half: Half) -> CorpusSeries:
    values = windows.rate[windows.rows(clients)].sum(axis=0)
    values = np.where(_gaps(windows), np.nan, values)
    history = History(values, servegen.WINDOW_S, 0.0)
    return CorpusSeries(f"servegen_{windows.model}_{label}_10m", windows.model, kind, half, clients, history, windows)


def _minute(windows: ClientWindows, kind: str, label: str, clients: tuple[int, ...], half: Half) -> CorpusSeries:
    count = min(windows.windows, int(MINUTE_DAYS * DAY_S / servegen.WINDOW_S))
    series = CorpusSeries(
        f"servegen_{windows.model}_{label}_1m",
        windows.model,
        kind,
        half,
        clients,
        History(np.zeros(count * servegen.MINUTES_PER_WINDOW), servegen.MINUTE_S, 0.0),
        windows,
    )
    values = series._counts(0) / servegen.MINUTE_S
    gaps = np.repeat(_gaps(windows)[:count], servegen.MINUTES_PER_WINDOW)
    history = History(np.where(gaps, np.nan, values), servegen.MINUTE_S, 0.0)
    return CorpusSeries(series.name, windows.model, kind, half, clients, history, windows)


def _azure(half: Half) -> list[CorpusSeries]:
    out = []
    for name in AZURE_SERIES[half]:
        minutes = read_series_csv(AZURE / f"{name}.csv").history
        history = History(minutes.values / servegen.MINUTE_S, minutes.step_seconds, minutes.start_ts)
        out.append(CorpusSeries(name, "azure-2023", "azure", half, (), history))
    return out

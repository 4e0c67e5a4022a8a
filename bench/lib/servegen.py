"""Alibaba ServeGen's per-client windows, as the project keeps them, and minute-level arrivals derived from them.

ServeGen (alibaba/ServeGen @ f891d1189eb32b3868dfc443800c4150548c282a, ``data/language/{m-large,m-small}``,
``data/multimodal/mm-image``; Apache-2.0; Xiang et al., "ServeGen", NSDI 2026) publishes, per client of a model,
10-minute windows: ``window_start_s, rate_req_per_s, cv, arrival_distribution, param1, param2``, where the
distribution (``Gamma`` or ``Weibull``, by shape then scale) is the one fitted to the window's inter-arrival times.
``data/traces/servegen/MODEL.csv.gz`` holds them compactly (:func:`pack`): one line per window with a non-zero rate,
``client,window_start_s,rate,cv,distribution initial (G/W/-),param1,param2``, numbers to 5 significant digits; a
window that is not there had no request.

Minute-level arrivals (:func:`minute_counts`), the way ServeGen's generator draws a workload: each client's arrivals
in each window are a renewal process started at the window's start, its inter-arrival times drawn from the window's
fitted distribution rescaled to the window's mean (1 / rate), which keeps the fitted shape and so its burstiness
(Gamma shape 0.06 → CV 4.1); a window with a rate and no distribution is Poisson. The arrivals are counted per
minute. A window expecting more than ``EXACT_PER_MINUTE`` arrivals a minute is drawn per minute from the renewal
central limit instead — normal, mean λ·60, variance CV²·λ·60, rounded, never negative — since its gaps are far
shorter than a minute (at 200 a minute the mean gap is 0.3 s) and millions of draws would say the same.
"""

from __future__ import annotations

import gzip
import math
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]

PACKED = Path(__file__).resolve().parents[2] / "data" / "traces" / "servegen"
MODELS = ("m-large", "m-small", "mm-image")
WINDOW_S = 600.0
MINUTE_S = 60.0
MINUTES_PER_WINDOW = 10
EXACT_PER_MINUTE = 200.0
DISTRIBUTIONS = {"-": 0, "G": 1, "W": 2}  # none (Poisson), Gamma, Weibull


@dataclass(frozen=True)
class ClientWindows:
    """One model's clients × windows: the rate (req/s, 0 when idle), the distribution code and its two parameters."""

    model: str
    clients: tuple[int, ...]  # the trace's client ids (chunk-N), in row order
    rate: FloatArray  # (clients, windows)
    distribution: npt.NDArray[np.int8]
    shape: FloatArray
    scale: FloatArray

    @property
    def windows(self) -> int:
        return int(self.rate.shape[1])

    def rows(self, clients: tuple[int, ...]) -> list[int]:
        index = {c: i for i, c in enumerate(self.clients)}
        return [index[c] for c in clients]


def load(model: str, directory: Path = PACKED) -> ClientWindows:
    """The packed windows of ``model`` (one of MODELS)."""
    path = directory / f"{model}.csv.gz"
    lines = gzip.decompress(path.read_bytes()).decode().splitlines()
    parsed = [line.split(",") for line in lines]
    clients = tuple(sorted({int(p[0]) for p in parsed}))
    windows = max(int(p[1]) for p in parsed) // int(WINDOW_S) + 1
    row = {c: i for i, c in enumerate(clients)}
    shape = (len(clients), windows)
    rate, first, second = np.zeros(shape), np.zeros(shape), np.zeros(shape)
    distribution = np.zeros(shape, dtype=np.int8)
    for client, start, r, _cv, dist, p1, p2 in parsed:
        i, w = row[int(client)], int(start) // int(WINDOW_S)
        rate[i, w], first[i, w], second[i, w] = float(r), float(p1), float(p2)
        distribution[i, w] = DISTRIBUTIONS[dist]
    return ClientWindows(model, clients, rate, distribution, first, second)


def interval_cv(distribution: int, shape: float) -> float:
    """The coefficient of variation of the window's inter-arrival distribution: Gamma 1/√k, Weibull
    √(Γ(1 + 2/k) / Γ(1 + 1/k)² − 1), Poisson 1. Gamma k 0.25 → 2; Weibull k 1 → 1."""
    if distribution == 1 and shape > 0:
        return 1.0 / math.sqrt(shape)
    if distribution == 2 and shape > 0:
        ratio = math.exp(math.lgamma(1 + 2 / shape) - 2 * math.lgamma(1 + 1 / shape))
        return math.sqrt(max(ratio - 1.0, 0.0))
    return 1.0


def minute_counts(windows: ClientWindows, row: int, first_window: int, count: int, seed: int) -> IntArray:
    """Arrivals per minute of one client over ``count`` windows from ``first_window`` (see the module docstring);
    the same seed gives the same arrivals."""
    rng = np.random.default_rng([seed, windows.clients[row], first_window])
    out = np.zeros(count * MINUTES_PER_WINDOW, dtype=np.int64)
    for k in range(count):
        w = first_window + k
        rate = float(windows.rate[row, w])
        if rate <= 0:
            continue
        dist, shape = int(windows.distribution[row, w]), float(windows.shape[row, w])
        minutes = out[k * MINUTES_PER_WINDOW : (k + 1) * MINUTES_PER_WINDOW]
        if rate * MINUTE_S > EXACT_PER_MINUTE:
            mean = rate * MINUTE_S
            sd = interval_cv(dist, shape) * math.sqrt(mean)
            minutes[:] = np.maximum(np.rint(rng.normal(mean, sd, MINUTES_PER_WINDOW)), 0)
        else:
            arrivals = _renewal_arrivals(rng, rate, dist, shape)
            minutes[:] = np.bincount((arrivals // MINUTE_S).astype(np.int64), minlength=MINUTES_PER_WINDOW)[
                :MINUTES_PER_WINDOW
            ]
    return out


def _renewal_arrivals(rng: np.random.Generator, rate: float, dist: int, shape: float) -> FloatArray:
    """Arrival times in [0, 600) of a renewal process whose gaps have mean 1 / ``rate`` and the window's shape."""
    mean_gap = 1.0 / rate
    expected = rate * WINDOW_S
    times: list[FloatArray] = []
    elapsed = 0.0
    while elapsed < WINDOW_S:
        n = int(expected + 4 * math.sqrt(expected) + 16)
        gaps = _gaps(rng, n, dist, shape) * mean_gap
        chunk = elapsed + np.cumsum(gaps)
        times.append(chunk)
        elapsed = float(chunk[-1])
    arrivals = np.concatenate(times)
    kept: FloatArray = arrivals[arrivals < WINDOW_S]
    return kept


def _gaps(rng: np.random.Generator, n: int, dist: int, shape: float) -> FloatArray:
    """``n`` gaps of mean 1 with the window's distribution shape (exponential when it has none)."""
    if dist == 1 and shape > 0:
        gaps: FloatArray = rng.gamma(shape, 1.0 / shape, n)
        return gaps
    if dist == 2 and shape > 0:
        return rng.weibull(shape, n) / math.gamma(1 + 1 / shape)
    return rng.exponential(1.0, n)


def pack(raw: Path, out: Path) -> None:
    """Write ``out/MODEL.csv.gz`` from ServeGen's raw ``raw/MODEL/chunk-N-trace.csv`` files (see the module
    docstring): ``python -m bench.lib.servegen RAW_DIR OUT_DIR``."""
    out.mkdir(parents=True, exist_ok=True)
    for model in MODELS:
        lines: list[str] = []
        files = sorted((raw / model).glob("chunk-*-trace.csv"), key=lambda p: int(p.name.split("-")[1]))
        for path in files:
            client = int(path.name.split("-")[1])
            for line in path.read_text().splitlines():
                start, rate, cv, dist, p1, p2 = line.split(",")
                if float(rate) == 0:
                    continue
                initial = dist[:1] if dist else "-"
                numbers = ",".join(f"{float(x):.5g}" for x in (rate, cv))
                params = ",".join(f"{float(x):.5g}" for x in (p1, p2))
                lines.append(f"{client},{int(float(start))},{numbers},{initial},{params}")
        (out / f"{model}.csv.gz").write_bytes(gzip.compress(("\n".join(lines) + "\n").encode(), 9, mtime=0))


if __name__ == "__main__":
    pack(Path(sys.argv[1]), Path(sys.argv[2]))

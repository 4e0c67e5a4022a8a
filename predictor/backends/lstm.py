"""A small LSTM (torch, CPU): reads a window of the recent history and emits all h steps at once; seeded."""

from __future__ import annotations

from typing import Self

import numpy as np
import torch  # heavy: only this module imports it, and the registry imports this module on first use

from predictor.backends.gaps import fill_gaps, require_observed
from predictor.backends.intervals import residual_band
from predictor.base import FloatArray, Forecast, ForecastError, History

MIN_OBSERVED = 16
MIN_WINDOWS = 8
MIN_INPUT = 4


class LSTMForecaster:
    """LSTM(1 → hidden) + a linear head to h outputs, trained for a bounded number of Adam steps on the history's
    windows; intervals from the quantiles of its in-sample residuals per step (calibration sharpens them later).
    """

    def __init__(
        self, seed: int = 0, window: int = 32, hidden: int = 16, train_steps: int = 200, batch: int = 64
    ) -> None:
        self.name = "lstm"
        self.seed = seed
        self.window = window
        self.hidden = hidden
        self.train_steps = train_steps  # 200 steps × 64 windows × 32 inputs: about a second on one core
        self.batch = batch
        self.max_windows = 2_000
        self._series: FloatArray | None = None
        self._skip = 0
        self._cache: dict[int, Forecast] = {}

    def fit(self, history: History) -> Self:
        require_observed(history, MIN_OBSERVED, "lstm")
        filled = fill_gaps(history.values)
        self._series = filled.values
        self._skip = filled.trailing_missing
        self._cache = {}
        return self

    def predict(self, horizon: int) -> Forecast:
        if self._series is None:
            raise ForecastError("lstm: predict called before fit")
        if horizon not in self._cache:
            self._cache[horizon] = self._train_and_forecast(self._series, horizon)
        return self._cache[horizon]

    def _train_and_forecast(self, series: FloatArray, horizon: int) -> Forecast:
        # A trailing gap of g steps: train for g + h outputs and keep the last h.
        outputs = horizon + self._skip
        n = len(series)
        window = min(self.window, n - outputs - MIN_WINDOWS)
        if window < MIN_INPUT:
            raise ForecastError(
                f"lstm needs at least {MIN_INPUT + MIN_WINDOWS + outputs} contiguous steps for a {horizon}-step "
                f"forecast, got {n}"
            )
        # Scale by the mean absolute step change: a series moving ±2,000 a step trains like one moving ±1.
        scale = float(np.mean(np.abs(np.diff(series)))) or 1.0
        starts = np.arange(max(0, n - window - outputs + 1 - self.max_windows), n - window - outputs + 1)
        inputs = np.stack([series[s : s + window] for s in starts])
        level = inputs[:, -1:]
        targets = np.stack([series[s + window : s + window + outputs] for s in starts])
        x = torch.tensor((inputs - level) / scale, dtype=torch.float32).unsqueeze(-1)
        y = torch.tensor((targets - level) / scale, dtype=torch.float32)
        query = torch.tensor((series[-window:] - series[-1]) / scale, dtype=torch.float32).reshape(1, window, 1)

        threads = torch.get_num_threads()
        # One thread for batches of 64 × 32 × 16: the pool's hand-offs cost more than the arithmetic; restored below.
        torch.set_num_threads(1)
        try:
            return self._train(x, y, query, targets, level, scale, series[-1], outputs)
        finally:
            torch.set_num_threads(threads)

    def _train(
        self,
        x: torch.Tensor,
        y: torch.Tensor,
        query: torch.Tensor,
        targets: FloatArray,
        level: FloatArray,
        scale: float,
        last: float,
        outputs: int,
    ) -> Forecast:
        with torch.random.fork_rng(devices=[]):  # seed locally; the caller's global RNG state is left untouched
            torch.manual_seed(self.seed)
            net = _Net(self.hidden, outputs)
            optimiser = torch.optim.Adam(net.parameters(), lr=0.01)
            generator = torch.Generator().manual_seed(self.seed)
            for _ in range(self.train_steps):
                batch = torch.randint(0, len(x), (min(self.batch, len(x)),), generator=generator)
                optimiser.zero_grad()
                loss = torch.nn.functional.l1_loss(net(x[batch]), y[batch])  # L1: the median, robust to spikes
                loss.backward()  # type: ignore[no-untyped-call]
                optimiser.step()
            with torch.no_grad():
                fitted = net(x).numpy().astype(np.float64) * scale + level
                point = net(query).numpy().astype(np.float64)[0] * scale + last
        residuals = targets - fitted
        keep = slice(self._skip, outputs)
        return residual_band(point[keep], [residuals[:, j] for j in range(self._skip, outputs)])


class _Net(torch.nn.Module):
    """LSTM encoder → last hidden state → linear head of ``outputs`` values."""

    def __init__(self, hidden: int, outputs: int) -> None:
        super().__init__()
        self.lstm = torch.nn.LSTM(input_size=1, hidden_size=hidden, batch_first=True)
        self.head = torch.nn.Linear(hidden, outputs)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        encoded, _ = self.lstm(x)
        out: torch.Tensor = self.head(encoded[:, -1, :])
        return out

"""A small LSTM (torch, CPU): reads a window of the recent history and emits all h steps at once; seeded."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Self

import numpy as np
import torch  # heavy: only this module imports it, and the registry imports this module on first use

from predictor.backends.gaps import fill_gaps, require_observed
from predictor.backends.intervals import residual_band
from predictor.base import FloatArray, Forecast, ForecastError, History

MIN_OBSERVED = 16
MIN_WINDOWS = 8
MIN_INPUT = 4


@dataclass(frozen=True)
class _Trained:
    """A net trained on the fitted series for ``outputs`` steps, with what its forecasts need besides the window:
    the input length, the scale and its in-sample residuals per output step (windows × outputs)."""

    net: _Net
    window: int
    scale: float
    residuals: FloatArray


class LSTMForecaster:
    """LSTM(1 → hidden) + a linear head to h outputs, trained for a bounded number of Adam steps on the history's
    windows; intervals from the quantiles of its in-sample residuals per step (calibration sharpens them later).

    ``update`` keeps the trained weights, scale and residuals and reads the new last window: one forward pass
    (about a millisecond against a second of training), with weights that lag the data by up to K origins.
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
        self._fitted: FloatArray | None = None  # the filled series the nets learn from
        self._series: FloatArray | None = None  # the filled series they forecast from: fitted, or a later update
        self._history: History | None = None
        self._skip = 0
        self._nets: dict[int, _Trained] = {}  # per number of outputs (trailing gap + horizon)

    def fit(self, history: History) -> Self:
        require_observed(history, MIN_OBSERVED, "lstm")
        self._absorb(history)
        self._fitted = self._series
        self._nets = {}
        return self

    def update(self, history: History) -> Self:
        """Forecast from ``history`` with the weights trained on the fitted one; a history that does not extend the
        last one is fitted instead."""
        if self._history is None or not history.extends(self._history):
            return self.fit(history)
        self._absorb(history)
        return self

    def predict(self, horizon: int) -> Forecast:
        if self._fitted is None or self._series is None:
            raise ForecastError("lstm: predict called before fit")
        # A trailing gap of g steps: forecast g + h outputs and keep the last h.
        outputs = horizon + self._skip
        if outputs not in self._nets:
            self._nets[outputs] = self._train(self._fitted, outputs)
        trained = self._nets[outputs]
        series = self._series
        query = torch.tensor((series[-trained.window :] - series[-1]) / trained.scale, dtype=torch.float32)
        with torch.no_grad():
            point = trained.net(query.reshape(1, -1, 1)).numpy().astype(np.float64)[0] * trained.scale + series[-1]
        steps = range(self._skip, outputs)
        return residual_band(point[self._skip :], [trained.residuals[:, j] for j in steps])

    def _absorb(self, history: History) -> None:
        filled = fill_gaps(history.values)
        self._history = history
        self._series = filled.values
        self._skip = filled.trailing_missing

    def _train(self, series: FloatArray, outputs: int) -> _Trained:
        n = len(series)
        window = min(self.window, n - outputs - MIN_WINDOWS)
        if window < MIN_INPUT:
            raise ForecastError(
                f"lstm needs at least {MIN_INPUT + MIN_WINDOWS + outputs} contiguous steps for {outputs} outputs "
                f"(horizon and trailing gap), got {n}"
            )
        # Scale by the mean absolute step change: a series moving ±2,000 a step trains like one moving ±1.
        scale = float(np.mean(np.abs(np.diff(series)))) or 1.0
        starts = np.arange(max(0, n - window - outputs + 1 - self.max_windows), n - window - outputs + 1)
        inputs = np.stack([series[s : s + window] for s in starts])
        level = inputs[:, -1:]
        targets = np.stack([series[s + window : s + window + outputs] for s in starts])
        x = torch.tensor((inputs - level) / scale, dtype=torch.float32).unsqueeze(-1)
        y = torch.tensor((targets - level) / scale, dtype=torch.float32)

        threads = torch.get_num_threads()
        # One thread for batches of 64 × 32 × 16: the pool's hand-offs cost more than the arithmetic; restored below.
        torch.set_num_threads(1)
        try:
            net = self._fit_net(x, y, outputs)
            with torch.no_grad():
                fitted = net(x).numpy().astype(np.float64) * scale + level
        finally:
            torch.set_num_threads(threads)
        return _Trained(net, window, scale, targets - fitted)

    def _fit_net(self, x: torch.Tensor, y: torch.Tensor, outputs: int) -> _Net:
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
        return net


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

"""Every forecaster by name: ``make_forecaster("ets", seed=0)``; backends are imported on first use (torch, ...)."""

from __future__ import annotations

from collections.abc import Callable

from predictor.base import Forecaster

FORECASTER_NAMES: tuple[str, ...] = (
    "naive",
    "seasonal_naive",
    "auto",
    "prior",
    "smoothing",
    "ets",
    "sarimax",
    "gbm",
    "lstm",
    "ensemble",
)
ENSEMBLE_MEMBERS: tuple[str, ...] = ("naive", "seasonal_naive", "ets", "sarimax", "gbm", "lstm")


def make_forecaster(name: str, seed: int = 0, quick: bool = False, calibrated: bool = False) -> Forecaster:
    """A fresh forecaster; ``quick`` shrinks the learnt models (GBM 20 iterations, LSTM 30 steps) for tests.

    ``calibrated`` wraps it in split-conformal calibration (predictor.calibration) on its recent residuals.
    """
    if name not in FORECASTER_NAMES:
        raise ValueError(f"unknown forecaster {name!r}; known: {', '.join(FORECASTER_NAMES)}")
    if calibrated:
        from predictor.calibration import Calibrated

        return Calibrated(lambda: make_forecaster(name, seed, quick))
    return _build(name, seed, quick)


def forecaster_factory(name: str, seed: int = 0, quick: bool = False) -> Callable[[], Forecaster]:
    """A zero-argument factory, what Calibrated and the backtest take."""
    return lambda: make_forecaster(name, seed, quick)


def _build(name: str, seed: int, quick: bool) -> Forecaster:
    return _BUILDERS[name](seed, quick)


def _naive(seed: int, quick: bool) -> Forecaster:
    from predictor.backends.naive import Naive

    return Naive()


def _seasonal_naive(seed: int, quick: bool) -> Forecaster:
    from predictor.backends.naive import SeasonalNaive

    return SeasonalNaive()


def _auto(seed: int, quick: bool) -> Forecaster:
    from predictor.backends.auto import Auto

    return Auto()


def _prior(seed: int, quick: bool) -> Forecaster:
    from predictor.backends.prior import PriorForecaster

    return PriorForecaster()


def _smoothing(seed: int, quick: bool) -> Forecaster:
    from predictor.backends.smoothing import Smoothing

    return Smoothing()


def _ets(seed: int, quick: bool) -> Forecaster:
    from predictor.backends.ets import ETS

    return ETS()


def _sarimax(seed: int, quick: bool) -> Forecaster:
    from predictor.backends.sarimax import SarimaxFourier

    return SarimaxFourier(maxiter=20 if quick else 50)


def _gbm(seed: int, quick: bool) -> Forecaster:
    from predictor.backends.gbm import GBMQuantile

    return GBMQuantile(seed=seed, max_iter=20 if quick else 100, max_origins=200 if quick else 600)


def _lstm(seed: int, quick: bool) -> Forecaster:
    from predictor.backends.lstm import LSTMForecaster

    return LSTMForecaster(seed=seed, hidden=8 if quick else 16, train_steps=30 if quick else 200)


def _ensemble(seed: int, quick: bool) -> Forecaster:
    from predictor.backends.ensemble import Ensemble

    members = ("naive", "seasonal_naive", "ets") if quick else ENSEMBLE_MEMBERS
    return Ensemble({member: forecaster_factory(member, seed, quick) for member in members})


_BUILDERS: dict[str, Callable[[int, bool], Forecaster]] = {
    "naive": _naive,
    "seasonal_naive": _seasonal_naive,
    "auto": _auto,
    "prior": _prior,
    "smoothing": _smoothing,
    "ets": _ets,
    "sarimax": _sarimax,
    "gbm": _gbm,
    "lstm": _lstm,
    "ensemble": _ensemble,
}

"""The corpus: ServeGen's windows as the project keeps them, arrivals drawn the way ServeGen's generator draws them,
and the halves split once by client."""

from __future__ import annotations

import math

import numpy as np
import pytest

from bench.lib import servegen
from bench.lib.corpus import CorpusSeries, Half, build, split
from bench.lib.rate_oracle import rate_oracle_front


@pytest.fixture(scope="module")
def mm_image() -> servegen.ClientWindows:
    return servegen.load("mm-image")


def test_the_packed_windows_keep_every_client_and_window(mm_image: servegen.ClientWindows) -> None:
    assert mm_image.rate.shape == (35, 144) and len(set(mm_image.clients)) == 35
    assert np.all(mm_image.rate >= 0) and set(np.unique(mm_image.distribution)) <= {0, 1, 2}


def test_a_window_draws_its_rate_and_keeps_its_burstiness() -> None:
    rate, shape = 2.0, 0.25  # Gamma shape 0.25: gaps with a CV of 2
    windows = servegen.ClientWindows(
        "t",
        (1,),
        np.full((1, 200), rate),
        np.full((1, 200), 1, dtype=np.int8),
        np.full((1, 200), shape),
        np.ones((1, 200)),
    )
    counts = servegen.minute_counts(windows, 0, 0, 200, seed=7)
    per_window = counts.reshape(200, 10).sum(axis=1)
    assert per_window.mean() == pytest.approx(rate * 600, rel=0.05)
    # a renewal process with gap CV c counts c² times a Poisson's variance over a window: ~ 4 × 1,200
    assert 2.0 < per_window.var() / per_window.mean() < 6.0
    assert servegen.interval_cv(1, shape) == pytest.approx(2.0)
    assert np.array_equal(counts, servegen.minute_counts(windows, 0, 0, 200, seed=7))  # seeded


def test_a_busy_window_is_drawn_from_the_renewal_central_limit() -> None:
    rate = 50.0  # 3,000 a minute: past EXACT_PER_MINUTE
    windows = servegen.ClientWindows(
        "t", (1,), np.full((1, 50), rate), np.zeros((1, 50), dtype=np.int8), np.zeros((1, 50)), np.zeros((1, 50))
    )
    counts = servegen.minute_counts(windows, 0, 0, 50, seed=1)
    assert counts.mean() == pytest.approx(rate * 60, rel=0.01) and counts.std() == pytest.approx(
        math.sqrt(3000), rel=0.2
    )


def test_the_halves_are_disjoint_fixed_and_cover_every_client(mm_image: servegen.ClientWindows) -> None:
    halves = split(mm_image.clients, "mm-image")
    assert set(halves[Half.TUNE]).isdisjoint(halves[Half.REPORT])
    assert set(halves[Half.TUNE]) | set(halves[Half.REPORT]) == set(mm_image.clients)
    assert halves == split(mm_image.clients, "mm-image")


@pytest.fixture(scope="module")
def report() -> list[CorpusSeries]:
    return [s for s in build(Half.REPORT) if s.model == "mm-image"]


def test_an_aggregate_is_the_sum_of_its_tenants(report: list[CorpusSeries]) -> None:
    for series in (s for s in report if s.kind == "agg5"):
        members = series.members()
        assert len(members) == 5
        total = np.sum([m.values for m in members], axis=0)
        np.testing.assert_allclose(total, series.history.values)


def test_singles_are_active_clients_of_their_half(report: list[CorpusSeries], mm_image: servegen.ClientWindows) -> None:
    tune = set(split(mm_image.clients, "mm-image")[Half.TUNE])
    for series in (s for s in report if s.kind == "single"):
        assert not set(series.clients) & tune
        assert np.mean(series.history.values[np.isfinite(series.history.values)] > 0) >= 0.5 or series.minute_level


def test_the_rate_oracle_knows_the_rate_and_pays_for_the_noise(report: list[CorpusSeries]) -> None:
    minute = next(s for s in report if s.minute_level and s.kind == "all")
    front = rate_oracle_front(minute, capacity=0.5, warm=60, replicates=40)
    attainments = [p.attainment for p in front]
    hours = [p.replica_hours for p in front]
    assert attainments == sorted(attainments) and hours == sorted(hours)  # a higher level costs more, covers more
    assert front[-1].attainment > 0.95

"""auto's choice: each candidate's bound scored by the pinball loss once the demand it was for arrives."""

from __future__ import annotations

import pytest

from predictor.base import Forecast
from predictor.selection import MIN_SCORED, SkillLedger, pinball


def test_the_pinball_loss_charges_a_shortfall_far_more_than_an_excess_at_a_high_level() -> None:
    assert pinball(100.0, 110.0, 0.99) == pytest.approx(0.1)
    assert pinball(100.0, 90.0, 0.99) == pytest.approx(9.9)


def ledger() -> SkillLedger:
    return SkillLedger(("prior", "smoothing"), 0.99, 2, 100, "prior")


def test_the_default_stands_until_enough_is_scored_then_a_clearly_tighter_bound_wins() -> None:
    book = ledger()
    for t in range(MIN_SCORED + 2):
        book.record(t + 2.0, {"prior": 150.0, "smoothing": 110.0})  # both cover 100; smoothing is tighter
        book.observe(float(t), 100.0)
        if book.scored < MIN_SCORED:
            assert book.best() == "prior"
    assert book.scored == MIN_SCORED and book.best() == "smoothing"
    assert book.mean_losses() == {"prior": pytest.approx(0.5), "smoothing": pytest.approx(0.1)}


def test_a_small_lead_is_not_followed() -> None:
    book = ledger()
    for t in range(MIN_SCORED + 2):
        book.record(t + 2.0, {"prior": 110.0, "smoothing": 109.0})  # 0.1 against 0.09: within the margin
        book.observe(float(t), 100.0)
    assert book.best() == "prior"


def test_a_bound_that_falls_short_loses_and_old_scores_leave_the_window() -> None:
    book = SkillLedger(("prior", "smoothing"), 0.99, 1, 80, "prior")
    for t in range(200):
        short = t < 100  # smoothing falls short at first, then the prior does
        bounds = {"prior": 90.0 if not short else 120.0, "smoothing": 90.0 if short else 120.0}
        book.record(t + 1.0, bounds)
        book.observe(float(t), 100.0)
        if t == 99:
            assert book.best() == "prior"
    assert book.scored == 80 and book.best() == "smoothing"


def test_a_missing_value_or_a_missing_candidate_scores_nothing() -> None:
    book = ledger()
    book.record(2.0, {"prior": 1.0, "smoothing": 2.0})
    book.record(3.0, {"prior": 1.0})
    book.observe(2.0, float("nan"))
    book.observe(3.0, 1.0)
    assert book.scored == 0


def flat(value: float, upper: float) -> Forecast:
    import numpy as np

    return Forecast(np.full(5, value), np.full(5, value * 0.9), np.full(5, upper))


def test_the_loop_follows_the_candidate_that_scores_better_for_each_pool() -> None:
    import numpy as np

    from predictor.auto_choice import AutoChooser, decision_point
    from predictor.base import ForecastError, History

    chooser = AutoChooser()
    point = decision_point(0.95, 120.0, 60.0)  # 2 steps ahead at the 95 % quantile
    assert point.horizon_steps == 2
    values: list[float] = []
    for cycle in range(MIN_SCORED + 5):
        values.append(100.0)
        history = History(np.array(values), 60.0)
        candidates = {"prior": flat(100.0, 130.0), "smoothing": flat(100.0, 105.0)}  # both cover; smoothing tighter
        choice = chooser.choose("chat", point, history, candidates)
        if cycle < MIN_SCORED:
            assert choice.model == "prior"
    assert choice.model == "smoothing" and choice.selection is not None
    assert choice.selection.losses["smoothing"] < choice.selection.losses["prior"]
    failed = chooser.choose("chat", point, history, {"prior": flat(1, 2), "smoothing": ForecastError("short")})
    assert failed.model == "prior"  # the one that forecast
    chooser.choose("chat", decision_point(0.99, 120.0, 60.0), history, candidates)  # a new target: a new ledger
    assert chooser.choose("chat", decision_point(0.99, 120.0, 60.0), history, candidates).model == "prior"

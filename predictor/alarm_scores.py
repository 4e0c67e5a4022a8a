"""How well a saturation alarm called what happened: precision, recall, F1 and the precision–recall curve.

An alarm at an origin says "demand will cross the threshold within the horizon"; the event is that it did.
10 alarms of which 8 were right, out of 16 events → precision 0.8, recall 0.5, F1 2·0.8·0.5 / 1.3 = 0.615.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from predictor.base import FloatArray

BoolArray = np.ndarray[Any, np.dtype[np.bool_]]
CUTOFFS = tuple(round(0.05 * i, 2) for i in range(1, 20))  # 0.05, 0.10, ..., 0.95


def alarm_score(alarm: BoolArray, event: BoolArray) -> dict[str, float | None]:
    """Precision, recall and F1 of ``alarm`` against ``event``; a ratio with a zero denominator is None."""
    hits = int(np.sum(alarm & event))
    precision = hits / int(alarm.sum()) if alarm.any() else None
    recall = hits / int(event.sum()) if event.any() else None
    f1 = None
    if precision is not None and recall is not None:
        f1 = 2 * precision * recall / (precision + recall) if precision + recall > 0 else 0.0
    return {"precision": precision, "recall": recall, "f1": f1}


def pr_curve(probability: FloatArray, event: BoolArray) -> list[dict[str, float | None]]:
    """Precision and recall of the alarm ``probability >= cutoff`` at each cut-off in :data:`CUTOFFS`."""
    return [{"cutoff": cutoff, **_pr(alarm_score(probability >= cutoff, event))} for cutoff in CUTOFFS]


def _pr(score: dict[str, float | None]) -> dict[str, float | None]:
    return {"precision": score["precision"], "recall": score["recall"]}


def average_precision(probability: FloatArray, event: BoolArray) -> float | None:
    """Σ (R_i − R_{i−1}) · P_i over the distinct probabilities, highest first (scikit-learn's definition); None
    without events. Events ranked first and second of four, the rest not → AP 1.0; ranked last → (1/3 + 2/4) / 2."""
    if not event.any():
        return None
    order = np.argsort(-probability, kind="stable")
    ranked, hit = probability[order], event[order]
    true_positives = np.cumsum(hit)
    alarms = np.arange(1, len(ranked) + 1)
    last_of_tie = np.append(ranked[1:] != ranked[:-1], True)  # tied probabilities are one cut-off
    precision = true_positives[last_of_tie] / alarms[last_of_tie]
    recall = true_positives[last_of_tie] / true_positives[-1]
    return float(np.sum(np.diff(recall, prepend=0.0) * precision))

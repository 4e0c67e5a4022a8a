"""Reading attainment-versus-cost fronts: what a policy's sweep costs at an attainment, and a run's cost against
another policy's front at the same attainment.

A front is the points of one policy's sweep (a knob's values), each (attainment, replica-hours). Between two points it
is the straight line; past its best attainment it has no value. A run is compared with a front at the attainment the
run reached; where the front never reaches it, both are compared where the front ends — the run's own front read
there — so a policy that attains more than the baseline ever does is not charged its extra attainment.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Point:
    """One run: the knob's value and what the run cost and attained."""

    knob: float
    attainment: float
    replica_hours: float
    scale_events: int = 0

    def row(self) -> dict[str, float | int]:
        return {
            "knob": self.knob,
            "attainment": round(self.attainment, 4),
            "replica_hours": round(self.replica_hours, 3),
            "scale_events": self.scale_events,
        }


def replica_hours_at(curve: Sequence[Point], attainment: float) -> float | None:
    """The curve's replica-hours at ``attainment``: the cheapest point reaching it, or the straight line between the
    two frontier points around it; None when no point reaches it. Points (0.97, 100) and (0.99, 120) → 110 at 0.98."""
    reaching = [p for p in curve if p.attainment >= attainment - 1e-12]
    if not reaching:
        return None
    upper = min(reaching, key=lambda p: (p.replica_hours, -p.attainment))
    below = [p for p in curve if p.attainment < attainment and p.replica_hours < upper.replica_hours]
    if not below:
        return upper.replica_hours
    lower = max(below, key=lambda p: (p.attainment, -p.replica_hours))
    share = (attainment - lower.attainment) / (upper.attainment - lower.attainment)
    return lower.replica_hours + share * (upper.replica_hours - lower.replica_hours)


def attainment_at(curve: Sequence[Point], replica_hours: float) -> float | None:
    """The front's attainment at ``replica_hours``: the best attainment among points costing at most that, or the
    straight line toward the next dearer point; None when every point costs more. Points (0.97, 100) and (0.99, 120)
    → 0.98 at 110."""
    cheaper = [p for p in curve if p.replica_hours <= replica_hours + 1e-12]
    if not cheaper:
        return None
    lower = max(cheaper, key=lambda p: (p.attainment, -p.replica_hours))
    dearer = [p for p in curve if p.replica_hours > replica_hours and p.attainment > lower.attainment]
    if not dearer:
        return round(lower.attainment, 4)
    upper = min(dearer, key=lambda p: (p.replica_hours, -p.attainment))
    share = (replica_hours - lower.replica_hours) / (upper.replica_hours - lower.replica_hours)
    return round(lower.attainment + share * (upper.attainment - lower.attainment), 4)


@dataclass(frozen=True)
class Matched:
    """A run against a baseline front at one attainment: the run's replica-hours there, the baseline's, and where."""

    attainment: float
    replica_hours: float
    baseline_replica_hours: float

    @property
    def ratio(self) -> float:
        return self.replica_hours / self.baseline_replica_hours


def matched(run: Point, own_front: Sequence[Point], baseline: Sequence[Point]) -> Matched | None:
    """``run`` against ``baseline``'s front at the attainment it reached; where the baseline never reaches it, the
    run's own front (its sweep, the run among it) and the baseline's at the baseline's best attainment (module
    docstring). None when neither can be read (the run's front never comes down to the baseline's best)."""
    best = max(p.attainment for p in baseline)
    if run.attainment <= best + 1e-12:
        cost = replica_hours_at(baseline, run.attainment)
        return None if cost is None else Matched(run.attainment, run.replica_hours, cost)
    own = replica_hours_at([*own_front, run], best)
    cost = replica_hours_at(baseline, best)
    return None if own is None or cost is None else Matched(best, own, cost)


def gain_share(reactive: float, predictive: float, perfect: float) -> float | None:
    """The share of the achievable gain won: (reactive − predictive) / (reactive − the same policy fed the true
    future), all at one attainment. Reactive 140, predictive 120, perfect 100 → 0.5; None where reactive is no
    dearer than the perfect forecast (nothing to win)."""
    if reactive <= perfect + 1e-12:
        return None
    return (reactive - predictive) / (reactive - perfect)

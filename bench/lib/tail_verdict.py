"""How a latency benchmark judges a tail quantile it measured in rounds: the quantile of the median round, its
inflation against a baseline condition, the spread of that inflation across rounds, and a verdict that holds only
when the spread does.

A p99 of one run says as much about the run as about the system: a handful of slow requests make it, and whether
the few stalls that make them (a collection, a burst of other work on the machine) fall inside a window is chance.
So each condition runs in several rounds, the rounds of all conditions interleaved, and each round's own quantile is
taken: a burst of other work that hits one or two rounds of twelve moves the pooled quantile (the 20th slowest of
1,920 requests is then one of that burst's) but not the median round's. The spread is a bootstrap over rounds: draw
rounds with replacement, the same rounds for every condition (round ``i`` of each ran under the same machine, a
minute apart at most, which is what pairing them keeps), and take the median rounds' quantiles again. A target is
met when the interval meets it, missed when the interval misses it, and unclear otherwise. Pure: latencies in,
figures out; the random draws come from a seed.
"""

from __future__ import annotations

import random
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum

from wire.percentile import percentile

Rounds = Sequence[Sequence[float]]  # one condition's latencies, round by round


@dataclass(frozen=True)
class Interval:
    """An estimate on all rounds, with the bootstrap interval around it."""

    value: float
    low: float
    high: float

    def rounded(self, digits: int = 3) -> list[float]:
        return [round(self.low, digits), round(self.value, digits), round(self.high, digits)]


def pooled_quantile(rounds: Rounds, q: float, picked: Sequence[int] | None = None) -> float:
    """The ``q`` percentile of the ``picked`` rounds' latencies pooled (all rounds by default)."""
    indices = range(len(rounds)) if picked is None else picked
    values = [latency for index in indices for latency in rounds[index]]
    if not values:
        raise ValueError("no latencies to take a quantile of")
    return percentile(values, q)


def round_quantile(rounds: Rounds, q: float, picked: Sequence[int] | None = None) -> float:
    """The median over the ``picked`` rounds (all by default) of each round's own ``q`` percentile."""
    indices = range(len(rounds)) if picked is None else picked
    quantiles = [percentile(rounds[index], q) for index in indices if rounds[index]]
    if not quantiles:
        raise ValueError("no latencies to take a quantile of")
    return statistics.median(quantiles)


def inflation(condition: Rounds, alone: Rounds, q: float, picked: Sequence[int] | None = None) -> float:
    """How much higher the condition's median round quantile is than the baseline's: 120 ms against 100 → 0.2."""
    return round_quantile(condition, q, picked) / round_quantile(alone, q, picked) - 1


def bootstrap_inflation(
    condition: Rounds, alone: Rounds, q: float, *, draws: int = 1000, level: float = 0.90, seed: int = 0
) -> Interval:
    """The inflation on all rounds, and the central ``level`` interval of it over ``draws`` paired draws of rounds
    (one round: no spread, the interval is the value itself)."""
    if len(condition) != len(alone):
        raise ValueError(f"paired rounds: {len(condition)} against {len(alone)}")
    value = inflation(condition, alone, q)
    if len(alone) < 2:
        return Interval(value, value, value)
    rng = random.Random(seed)
    count = len(alone)
    estimates = [inflation(condition, alone, q, [rng.randrange(count) for _ in range(count)]) for _ in range(draws)]
    tail = (1 - level) / 2 * 100
    return Interval(value, percentile(estimates, tail), percentile(estimates, 100 - tail))


def per_round_quantiles(rounds: Rounds, q: float) -> list[float]:
    """Each round's own ``q`` percentile (a round without latencies is left out)."""
    return [percentile(list(latencies), q) for latencies in rounds if latencies]


class Verdict(StrEnum):
    MET = "met"
    MISSED = "missed"
    UNCLEAR = "unclear"  # the interval straddles a bound: this run cannot tell


@dataclass(frozen=True)
class Judgement:
    verdict: Verdict
    reason: str


def judge(
    isolated: Interval, unisolated: Interval, max_isolated: float, min_unisolated: float, rounds: int = 2
) -> Judgement:
    """Unclear from one round (no spread to judge by); else met when the whole interval of the isolated inflation is
    at most ``max_isolated`` and the whole interval of the unisolated one at least ``min_unisolated`` (the noise is
    real and isolation removes it); missed when either interval lies wholly on the wrong side of its bound; unclear
    otherwise, with the bound the run cannot resolve."""
    iso, noise = f"isolated {_span(isolated)}", f"unisolated {_span(unisolated)}"
    if rounds < 2:
        return Judgement(Verdict.UNCLEAR, f"{iso}, {noise} from one round: no spread to judge by")
    if isolated.high <= max_isolated and unisolated.low >= min_unisolated:
        return Judgement(Verdict.MET, f"{iso} ≤ {max_isolated:.0%} and {noise} ≥ {min_unisolated:.0%}")
    if isolated.low > max_isolated:
        return Judgement(Verdict.MISSED, f"{iso}: above {max_isolated:.0%} in every part of the interval")
    if unisolated.high < min_unisolated:
        return Judgement(Verdict.MISSED, f"{noise}: under {min_unisolated:.0%}, no noise to isolate from")
    unresolved = iso if isolated.high > max_isolated else noise
    return Judgement(Verdict.UNCLEAR, f"{unresolved} straddles its bound: the rounds' spread cannot tell")


def _span(interval: Interval) -> str:
    return f"{interval.value:+.0%} ({interval.low:+.0%} to {interval.high:+.0%})"

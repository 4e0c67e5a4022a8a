"""The noisy-neighbour episode's rules, pure: when globex's burst comes, how it grows, when it ends, and the SLO chat
is given on this machine.

The demo cannot know how fast the machine it runs on generates: the same burst that queues acme's requests past a
fixed SLO on a busy 2-core machine leaves them far under it on a fast one (the engine serves acme, latency-critical,
before globex's batch work). So two things are measured instead of assumed:

- **chat's SLO** is calibrated once, before the first burst: ``slo_factor`` × the worst p99 chat's replicas reported
  to the server over the warm-up (the day's first requests, before the evening), rounded to two significant digits and
  at least ``min_slo_s``: 0.42 s measured → 1.7 s. An SLO is a promise a few times what a quiet pool delivers; a fixed
  10 s on a toy CPU model promised nothing the burst could break.
- **the burst** is a closed loop on what acme gets: it starts at ``first_rps`` and, each ``step_s`` (one enforcer
  window) in which acme's chat p99 stayed within the SLO, grows by ``growth`` up to ``max_rps``; it ends once the
  server has recorded both the throttle and the latency alert, or after ``max_s`` whatever happened.

The enforcer and the alert rules are the production code path; only the load and the SLO it is judged by adapt.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from replay.trace_load import MAX_GENERATED_TOKENS
from wire.percentile import percentile_or_none


@dataclass(frozen=True)
class NoisyEpisode:
    """``tenant`` floods chat from ``start_s`` of the first day and of every ``every_days``-th after it; each request
    asks for ``generated_tokens`` (a batch job's long generations; the day's ask for the trace's)."""

    tenant: str
    start_s: float
    first_rps: float
    growth: float
    step_s: float
    max_rps: float
    max_s: float
    generated_tokens: int = MAX_GENERATED_TOKENS
    every_days: int = 1

    def __post_init__(self) -> None:
        if not (self.start_s >= 0 and 0 < self.first_rps <= self.max_rps):
            raise ValueError(f"episode: needs start_s >= 0 and 0 < first_rps <= max_rps, got {self}")
        if not (self.growth > 1 and 0 < self.step_s <= self.max_s):
            raise ValueError(f"episode: needs growth > 1 and 0 < step_s <= max_s, got {self}")
        if self.every_days < 1:
            raise ValueError(f"episode: every_days must be >= 1, got {self.every_days}")
        if not 1 <= self.generated_tokens <= MAX_GENERATED_TOKENS:
            raise ValueError(f"episode: generated_tokens must be in 1..{MAX_GENERATED_TOKENS}")

    @property
    def end_s(self) -> float:
        """The latest the burst can end, in the day: 0:50 + 3:00 → 3:50."""
        return self.start_s + self.max_s

    def steps_to_max(self) -> int:
        """Steps of growth from ``first_rps`` to ``max_rps``: 2 → 16 requests/s by ×1.5 → 6 (3, 4.5, ..., 15.2, 16)."""
        steps, rps = 0, self.first_rps
        while rps < self.max_rps:
            rps, steps = min(self.max_rps, rps * self.growth), steps + 1
        return steps

    def bursts_on(self, lap: int) -> bool:
        return lap % self.every_days == 0


# globex's batch job floods chat over the evening peak (0:50 of the day, 21:00 of the trace is at 1:02): 2 requests/s
# of 128 generated tokens (the day's ask for 32 on average), half again each 10-s window acme's p99 stays within the
# SLO, at most 16 requests/s (under its quota of 8 a node on the three nodes, so that the rate limit is not what stops
# it before the enforcer does), for at most 3 minutes. Every other day only: the alerts it raises keep firing 5 minutes
# after their condition ends (alerting.defaults), so a burst each day would keep them firing for good.
NOISY_EPISODE = NoisyEpisode(
    "globex",
    start_s=50.0,
    first_rps=2.0,
    growth=1.5,
    step_s=10.0,
    max_rps=16.0,
    max_s=180.0,
    generated_tokens=128,
    every_days=2,
)


def next_rps(episode: NoisyEpisode, rps: float, acme_latencies_s: Sequence[float], slo_p99_seconds: float) -> float:
    """The burst's rate for the next step: held once acme's p99 over the last step is past the SLO (the harm is
    done, the enforcer is to act on it), else grown: 3 requests/s with acme's p99 at 1.2 s of a 1.7-s SLO → 4.5; a
    step without an answer to acme says nothing and grows it too (acme was starved or quiet)."""
    p99 = percentile_or_none(acme_latencies_s, 99)
    if p99 is not None and p99 > slo_p99_seconds:
        return rps
    return min(episode.max_rps, rps * episode.growth)


def burst_over(elapsed_s: float, episode: NoisyEpisode, *, throttled: bool, alerted: bool) -> bool:
    """The burst ends once the server recorded both the throttle and the latency alert, or at its longest."""
    return (throttled and alerted) or elapsed_s >= episode.max_s


@dataclass(frozen=True)
class SloCalibration:
    """chat's SLO from its warm-up: ``slo_factor`` × the worst p99 its replicas reported, at least ``min_slo_s``."""

    slo_factor: float = 4.0
    min_slo_s: float = 0.25
    warm_up_start_s: float = 10.0  # the day's first seconds left out: the replicas' first requests pay for warming
    warm_up_end_s: float = 45.0  # before the evening and the burst

    def slo_seconds(self, reported_p99_s: Sequence[float]) -> float | None:
        """The SLO to give chat, to two significant digits: 0.42 s → 1.7 s; None with nothing reported."""
        if not reported_p99_s:
            return None
        return max(self.min_slo_s, float(f"{self.slo_factor * max(reported_p99_s):.2g}"))


DEMO_CALIBRATION = SloCalibration()

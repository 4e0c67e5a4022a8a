"""The startup a pool's replicas take, measured from its own scale-ups."""

from __future__ import annotations

from autoscaler.startup import KEPT, MAX_WAIT_SECONDS, StartupLearner


def ticks(learner: StartupLearner, *steps: tuple[float, int, int]) -> StartupLearner:
    for now, ready, desired in steps:
        learner.observe(now, ready, desired)
    return learner


def test_a_scale_up_is_measured_from_the_tick_it_was_asked_to_the_tick_it_was_ready() -> None:
    learner = StartupLearner(120.0)
    assert (learner.seconds, learner.measurements) == (120.0, 0)  # nothing seen: as configured
    ticks(learner, (0.0, 2, 2), (5.0, 2, 6), (10.0, 3, 6), (85.0, 6, 6))
    assert (learner.seconds, learner.measurements) == (80.0, 1)


def test_the_estimate_is_the_longest_of_the_recent_measurements() -> None:
    learner = StartupLearner(120.0)
    t = 0.0
    for took in (80.0, 95.0, 130.0):
        ticks(learner, (t, 2, 2), (t + 5, 2, 4), (t + 5 + took, 4, 4), (t + 6 + took, 2, 2))
        t += 1000.0
    assert (learner.seconds, learner.measurements) == (130.0, 3)
    for _ in range(KEPT):  # eight faster ones push the slow ones out
        ticks(learner, (t, 2, 2), (t + 5, 2, 4), (t + 65, 4, 4), (t + 66, 2, 2))
        t += 1000.0
    assert (learner.seconds, learner.measurements) == (60.0, KEPT)


def test_replicas_starting_before_anyone_watched_and_cancelled_scale_ups_are_not_measured() -> None:
    learner = ticks(StartupLearner(120.0), (0.0, 2, 6), (30.0, 6, 6))  # the first tick: asked before
    assert learner.measurements == 0
    ticks(learner, (40.0, 6, 10), (50.0, 6, 6), (90.0, 10, 10))  # 10 asked, then given up before ready
    assert learner.measurements == 0
    ticks(learner, (100.0, 10, 12), (100.0 + MAX_WAIT_SECONDS + 1, 11, 12), (100.0 + MAX_WAIT_SECONDS + 2, 12, 12))
    assert learner.measurements == 0  # an hour without the replicas: failed, not slow


def test_a_second_scale_up_while_the_first_is_starting_is_a_wait_of_its_own() -> None:
    learner = ticks(StartupLearner(120.0), (0.0, 2, 2), (5.0, 2, 4), (20.0, 2, 8), (65.0, 4, 8), (90.0, 8, 8))
    assert learner.measurements == 2 and learner.seconds == 70.0  # 5 → 65 and 20 → 90

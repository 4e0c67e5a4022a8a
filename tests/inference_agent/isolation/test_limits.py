"""The limits a node applies: what is a valid limit, and which changes take a replacement replica."""

from __future__ import annotations

from typing import Any

import pytest

from inference_agent.isolation.limits import AppliedLimits, ReplicaLimits, needs_replacement


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"active_thread_percentage": 0}, "active_thread_percentage: 1..100"),
        ({"active_thread_percentage": 101}, "active_thread_percentage: 1..100"),
        ({"pinned_memory_mib": 0}, "pinned_memory_mib: a positive integer"),
        ({"cpu_millicores": -5}, "cpu_millicores: a positive integer"),
        ({"cpus": ()}, "cpus: at least one CPU"),
        ({"device": -1}, "device: an index >= 0"),
    ],
)
def test_a_limit_that_cannot_hold_is_refused_naming_its_field(fields: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        ReplicaLimits(**fields)


BASE = ReplicaLimits(device=0, active_thread_percentage=40, pinned_memory_mib=2048, cpus=(0,), cpu_millicores=500)


@pytest.mark.parametrize(
    ("change", "replace"),
    [
        ({"active_thread_percentage": 70}, True),  # raised: a running client cannot get more
        ({"active_thread_percentage": 20}, True),  # lowered: nor less; MPS reads it once, at the client's start
        ({"active_thread_percentage": None}, True),  # the limit removed is a raise to 100%
        ({"pinned_memory_mib": 4096}, True),
        ({"pinned_memory_mib": 1024}, True),
        ({"device": 1}, True),
        ({"cpus": (0, 1)}, False),  # affinity changes in place
        ({"cpu_millicores": 1500}, False),  # so does cpu.max
        ({}, False),
    ],
)
def test_needs_replacement_when_an_mps_limit_changes(change: dict[str, Any], replace: bool) -> None:
    new = ReplicaLimits(**{**BASE.__dict__, **change})
    assert needs_replacement(BASE, new) is replace


def test_applied_limits_describe_what_holds_and_why_the_rest_does_not() -> None:
    result = AppliedLimits("r1", 42, {"cpus": "0,1"}, {"cpu.max": "no cgroup root configured"})
    assert not result.complete
    assert result.describe() == "cpus: 0,1; cpu.max: not applied: no cgroup root configured"
    assert AppliedLimits("r2", 43).describe() == "no limits"

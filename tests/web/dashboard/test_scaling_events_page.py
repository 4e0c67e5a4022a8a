"""The pool page's scaling events: each shows its reason code, coloured by the code's family (up, down, held,
refused)."""

from __future__ import annotations

import re
from collections.abc import Callable

from fastapi.testclient import TestClient

from autoscaler.scaling_events import ReasonCode, ScalingEvent
from fleet.pools import PoolSpec
from fleet.scaling_log import Outcome
from tests.support.clock import FakeClock
from web.services import AppServices

Browser = Callable[[str], TestClient]


def test_each_event_shows_its_code_in_its_familys_colour(
    browser: Browser, services: AppServices, clock: FakeClock
) -> None:
    services.pools.create("chat", PoolSpec(max_replicas=10), now=clock())
    for ts, before, after, code in (
        (1, 2, 6, ReasonCode.STEP_LIMIT),  # a rail's code, but it added replicas: up
        (2, 6, 4, ReasonCode.REACTIVE_UTILIZATION),
        (3, 4, 4, ReasonCode.SCALE_DOWN_STABILIZED),
        (4, 4, 4, ReasonCode.NO_PLACEMENT),
        (5, 4, 5, None),  # recorded before codes
    ):
        event = ScalingEvent("chat", clock() - 60 + ts, before, after, "hybrid", "why", {}, Outcome.APPLIED, "local")
        services.events.add(ScalingEvent(**{**vars(event), "reason_code": code}))
    page = browser("viewer").get("/pools/chat").text
    rows = re.findall(r'<tr class="scale-(\w+)" data-reason-code="(\w*)">', page)
    assert rows == [  # newest first
        ("up", ""),
        ("refused", "NoPlacement"),
        ("held", "ScaleDownStabilized"),
        ("down", "ReactiveUtilization"),
        ("up", "StepLimit"),
    ]
    assert '<span class="badge reason scale-up" title="up">StepLimit</span>' in page

"""The pool page says when an HPA or KEDA ScaledObject scales the pool's target instead of fleetpilot."""

from __future__ import annotations

from collections.abc import Callable

from fastapi.testclient import TestClient

from fleet.pools import PoolSpec
from tests.support.clock import FakeClock
from web.services import AppServices

Browser = Callable[[str], TestClient]


def test_the_pool_page_names_what_scales_the_target(browser: Browser, services: AppServices, clock: FakeClock) -> None:
    services.pools.create("chat", PoolSpec(scale_target="apps/v1/StatefulSet/serving/chat"), now=clock())
    viewer = browser("viewer")
    assert 'id="pool-scaled-by"' not in viewer.get("/pools/chat").text
    services.pools.set_scaled_by("chat", "ScaledObject serving/chat")
    assert ">scaled by ScaledObject serving/chat</span>" in viewer.get("/pools/chat").text

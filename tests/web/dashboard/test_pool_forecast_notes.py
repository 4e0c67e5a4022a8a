"""What the pool page says of its forecast: warming up is not a failure; a failure after a good forecast says when
the band is from; auto's choice and the quantile the policy sizes for are named."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from fastapi.testclient import TestClient

from fleet.pools import PoolSpec
from predictor.store import ForecastPoint, GoodForecast, Selection, SubjectKind
from tests.support.clock import FakeClock
from web.services import AppServices

Browser = Callable[[str], TestClient]
METRIC = "request_rate_per_second"


def test_a_pool_still_warming_up_says_so_and_not_that_it_failed(
    browser: Browser, services: AppServices, clock: FakeClock
) -> None:
    services.pools.create("vision", PoolSpec(), now=clock())
    services.forecasts.mark_failed(
        [(SubjectKind.POOL, "vision", METRIC, "auto needs at least 3 observed values, got 0 (of 1 steps)")],
        attempted_at=clock(),
        short_history={(SubjectKind.POOL, "vision", METRIC)},
    )
    page = browser("viewer").get("/pools/vision").text
    assert 'id="forecast-warming-up"' in page and "Warming up" in page
    assert "failed" not in page and "from —" not in page


def test_the_page_names_autos_choice_and_the_quantile_it_sizes_for(
    browser: Browser, services: AppServices, clock: FakeClock
) -> None:
    services.pools.create("chat", PoolSpec(slo_attainment=0.98), now=clock())
    now = clock()
    levels = (0.05, 0.5, 0.95, 0.98, 0.99)
    points = [ForecastPoint(now + 60 * k, 10.0, 8.0, 13.0, (8.0, 10.0, 13.0, 14.0, 15.0)) for k in range(1, 16)]
    selection = Selection("smoothing", 0.98, 2, 240, {"prior": 0.4, "smoothing": 0.3})
    services.forecasts.save(
        [
            GoodForecast(
                SubjectKind.POOL,
                "chat",
                METRIC,
                now,
                "auto[smoothing]",
                now,
                60.0,
                900.0,
                now - 3600,
                now + 60,
                points,
                {"probability": 0.1, "eta_seconds": None, "capacity": 20.0},
                levels,
                selection,
            )
        ]
    )
    page = browser("viewer").get("/pools/chat").text
    assert "auto follows the smoothing" in page and "0.3 for the smoothing" in page
    assert "demand carried 98 % of the time" in page
    assert "98.0% quantile (what the policy sizes for)" in page  # the chart's line


def test_a_pool_without_capacity_says_why_the_autoscaler_holds_it(
    browser: Browser, services: AppServices, clock: FakeClock
) -> None:
    services.pools.create("vision", PoolSpec(), now=clock())
    now = clock()
    points = [ForecastPoint(now + 60 * k, 10.0, 8.0, 13.0) for k in range(1, 16)]
    why = "only 4 moments of the pool's replicas serving requests with a p99 latency measured, 30 needed"
    saturation: dict[str, Any] = {"probability": None, "eta_seconds": None, "capacity": None, "replicas": 2}
    saturation |= {"per_replica_capacity": None, "capacity_source": None, "capacity_missing": why}
    services.forecasts.save(
        [
            GoodForecast(
                SubjectKind.POOL,
                "vision",
                METRIC,
                now,
                "auto[prior]",
                now,
                60.0,
                900.0,
                now - 3600,
                now + 60,
                points,
                saturation,
            )
        ]
    )
    page = browser("viewer").get("/pools/vision").text
    assert 'id="capacity-missing"' in page and "30 needed" in page
    # no capacity, no risk to judge: the card says it does not know, not that saturation is not expected
    assert re.search(r"Saturates in</span><b>—</b>", page)

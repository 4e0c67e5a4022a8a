"""``GET /health``: the fleet health report — size class, the checks that matter at that size, pass / fail / not
measured against live figures, each with its trend over the previous 15 minutes — and what remote write and OTLP
senders send that no mapping source reads."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse

from collector.fleet_health import CheckResult, report
from web.auth import ServicesDep
from web.dashboard.deps import Viewer
from web.dashboard.health_figures import WINDOW_SECONDS, gather
from web.dashboard.render import page
from web.dashboard.security import DashboardRoute
from web.dashboard.units import ABSENT, SOURCE_NAMES, duration, ratio

router = APIRouter(route_class=DashboardRoute)
UNMAPPED_SHOWN = 20  # the families with the most samples; the API lists them all


def shown(result: CheckResult, value: float | None) -> str:
    """A check's figure in its unit: 0.87 → "87 %", 1.4 (times) → "1.40×", 42 s → "42.0 s"."""
    if value is None:
        return ABSENT
    unit = result.check.unit
    if unit == "ratio":
        return ratio(value)
    return duration(value) if unit == "seconds" else f"{value:.2f}×"


@router.get("/health", response_class=HTMLResponse)
def health(request: Request, user: Viewer, services: ServicesDep) -> HTMLResponse:
    gathered = gather(services)
    found = report(gathered.gpus, gathered.now, gathered.before)
    kept = services.remote.unmapped
    unmapped = sorted(kept.families(limit=2 * kept.max_families), key=lambda f: (-f.samples, f.source, f.name))
    return page(
        request,
        "health.html",
        user,
        report=found,
        shown=shown,
        window_minutes=WINDOW_SECONDS / 60,
        unmapped=unmapped[:UNMAPPED_SHOWN],
        unmapped_total=len(unmapped),
        unmapped_full=kept.full(),
        source_names=SOURCE_NAMES,
    )

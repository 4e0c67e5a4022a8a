"""Adopting a pool the nodes report and nobody configured, in one action from the Pools page (admin).

The pool is created as the API's ``POST /pools`` creates one (``apply_pool_create``: the same checks and audit row),
in dry run — the autoscaler decides and records, nothing is applied — with its capacity learned from what it serves
(``replica_capacity`` null), room to grow (``max_replicas`` twice its ready replicas, at least 8) and the latency SLO
the form says (prefilled from the p99 it reports). The pool page then shows its decisions, and why there are none
while its capacity cannot be learned yet.
"""

from __future__ import annotations

from fastapi import APIRouter, Request, status
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from pydantic import ValidationError

from fleet.pools import Mode
from web.auth import ServicesDep
from web.changes.audit import AuditorDep
from web.changes.pools import apply_pool_create
from web.dashboard.deps import Admin, CsrfForm, field, validation_problem
from web.dashboard.pages.pools import pools_page
from web.dashboard.pool_groups import unconfigured_pools
from web.dashboard.security import DashboardRoute
from web.errors import ApiError
from web.schemas.pools import PoolIn, Slo

router = APIRouter(route_class=DashboardRoute)
MIN_MAX_REPLICAS = 8


@router.post("/pools/{name}/adopt", response_class=HTMLResponse)
def adopt(
    name: str, request: Request, user: Admin, form: CsrfForm, services: ServicesDep, audit: AuditorDep
) -> Response:
    now = services.clock()
    view = services.fleet.read(now)
    configured = {p.name for p in services.pools.list()}
    found = {u.name: u for u in unconfigured_pools(view.pools_on_nodes, configured, {})}
    if name not in found:
        message = f"pool {name!r} is configured already" if name in configured else f"no node reports pool {name!r}"
        return pools_page(request, user, services, errors={name: message}, status_code=status.HTTP_409_CONFLICT)
    try:
        body = PoolIn(
            name=name,
            mode=Mode.DRY_RUN,
            max_replicas=max(MIN_MAX_REPLICAS, 2 * found[name].ready),
            slo=Slo.model_validate({"latency_p99_seconds": field(form, "slo_p99_seconds")}),
        )
        apply_pool_create(audit, body, now=now)
    except ValidationError as exc:
        return pools_page(request, user, services, errors={name: validation_problem(exc)[1]}, status_code=422)
    except ApiError as exc:
        return pools_page(request, user, services, errors={name: exc.message}, status_code=exc.status_code)
    return RedirectResponse(f"/pools/{name}?done=adopted", status_code=303)

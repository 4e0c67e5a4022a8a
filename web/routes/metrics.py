"""``GET /metrics``: the Prometheus text format of the fleet and of the control plane itself (behind the scrape
token when one is set)."""

from __future__ import annotations

from fastapi import APIRouter, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from web.auth import ServicesDep
from web.scrape_access import MetricsAccess

router = APIRouter(tags=["metrics"])


@router.get("/metrics", response_class=Response)
def metrics(services: ServicesDep, _access: MetricsAccess) -> Response:
    return Response(generate_latest(services.exposition or services.registry), media_type=CONTENT_TYPE_LATEST)

"""The FastAPI application: routers mounted, errors translated; everything it uses is handed in."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager

from fastapi import FastAPI
from starlette.middleware.gzip import GZipMiddleware

from web.auth import install_auth_limit
from web.body_limit import BodyLimitMiddleware
from web.dashboard.mount import mount_dashboard
from web.docs import install_docs
from web.errors import install_error_handlers
from web.request_id import RequestIdMiddleware
from web.routes import (
    alert_rules,
    alerts,
    audit,
    capacity,
    enforcement,
    forecasts,
    health,
    ingest,
    metrics,
    nodes,
    pools,
    remote_write,
    scaling,
    series,
    tenant_keys,
    tenants,
    tokens,
    unmapped,
    webhooks,
)
from web.services import AppServices

API_PREFIX = "/api/v1"

Lifespan = Callable[[FastAPI], AbstractAsyncContextManager[None]]


@asynccontextmanager
async def _no_background(_app: FastAPI) -> AsyncIterator[None]:
    yield


def create_app(services: AppServices, *, lifespan: Lifespan = _no_background) -> FastAPI:
    app = FastAPI(
        title="fleetpilot",
        summary="Control plane for GPU inference fleets: metrics, forecasts, autoscaling, isolation, alerting.",
        version="0.1.0",
        lifespan=lifespan,
        docs_url=None,  # both served by install_docs: offline, and behind the scrape token when one is set
        openapi_url=None,
        redoc_url=None,
    )
    app.state.services = services
    install_error_handlers(app)
    install_auth_limit(app, services.settings)
    app.add_middleware(BodyLimitMiddleware, max_body_bytes=services.settings.api_max_body_bytes)
    app.add_middleware(RequestIdMiddleware)
    # Pages and large answers compressed for clients that ask (a node page's 15 minutes of samples: 380 → 65 kB);
    # under 1 kB (an ingest's answer) is not worth it, and server-sent events are never buffered for it.
    app.add_middleware(GZipMiddleware, minimum_size=1024)
    for router in (
        ingest.router,
        remote_write.router,
        unmapped.router,
        nodes.router,
        series.router,
        tokens.router,
        pools.router,
        forecasts.router,
        capacity.router,
        scaling.router,
        tenants.router,
        tenant_keys.router,
        enforcement.router,
        alert_rules.router,
        alerts.router,
        webhooks.router,
        audit.router,
    ):
        app.include_router(router, prefix=API_PREFIX)
    app.include_router(health.router)
    app.include_router(metrics.router)
    install_docs(app)
    mount_dashboard(app, services)
    return app

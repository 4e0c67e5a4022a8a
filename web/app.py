"""The FastAPI application: routers mounted, errors translated; everything it uses is handed in."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager

from fastapi import FastAPI

from web.errors import install_error_handlers
from web.routes import (
    capacity,
    enforcement,
    forecasts,
    health,
    ingest,
    metrics,
    nodes,
    pools,
    scaling,
    series,
    tenants,
    tokens,
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
    )
    app.state.services = services
    install_error_handlers(app)
    for router in (
        ingest.router,
        nodes.router,
        series.router,
        tokens.router,
        pools.router,
        forecasts.router,
        capacity.router,
        scaling.router,
        tenants.router,
        enforcement.router,
    ):
        app.include_router(router, prefix=API_PREFIX)
    app.include_router(health.router)
    app.include_router(metrics.router)
    return app

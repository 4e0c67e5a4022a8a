"""Collector and database errors translated at the boundary: a clear 4xx, or a 5xx without a stack trace."""

from __future__ import annotations

import logging

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from sqlalchemy.exc import OperationalError

from collector.errors import BatchTooLarge, InvalidBatch, InvalidQuery, StorageUnavailable

log = logging.getLogger(__name__)
RETRY_AFTER_SECONDS = "2"


def install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(InvalidBatch)
    async def invalid_batch(_request: Request, exc: InvalidBatch) -> JSONResponse:
        errors = [{"sample": p.sample, "field": p.field, "message": p.message} for p in exc.problems[:100]]
        return JSONResponse({"detail": str(exc), "errors": errors}, status_code=422)

    @app.exception_handler(InvalidQuery)
    async def invalid_query(_request: Request, exc: InvalidQuery) -> JSONResponse:
        return JSONResponse({"detail": str(exc)}, status_code=422)

    @app.exception_handler(BatchTooLarge)
    async def too_large(_request: Request, exc: BatchTooLarge) -> JSONResponse:
        return JSONResponse({"detail": str(exc)}, status_code=413)

    @app.exception_handler(StorageUnavailable)
    async def storage_unavailable(request: Request, exc: StorageUnavailable) -> JSONResponse:
        log.warning("%s %s: %s", request.method, request.url.path, exc)
        return _unavailable()

    @app.exception_handler(OperationalError)
    async def database_down(request: Request, exc: OperationalError) -> JSONResponse:
        log.warning("%s %s: database unavailable: %s", request.method, request.url.path, exc.orig)
        return _unavailable()

    @app.exception_handler(Exception)
    async def internal(request: Request, exc: Exception) -> JSONResponse:
        log.error("%s %s failed", request.method, request.url.path, exc_info=exc)
        return JSONResponse({"detail": "internal error; the server log has the details"}, status_code=500)


def _unavailable() -> JSONResponse:
    return JSONResponse(
        {"detail": "database unavailable; retry later"},
        status_code=503,
        headers={"Retry-After": RETRY_AFTER_SECONDS},
    )

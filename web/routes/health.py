"""``/healthz`` (the process answers) and ``/readyz`` (the database answers too)."""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import JSONResponse
from sqlalchemy import text
from sqlalchemy.exc import SQLAlchemyError

from web.auth import ServicesDep

router = APIRouter(tags=["health"])


@router.get("/healthz")
def healthz() -> dict[str, str]:
    return {"status": "ok"}


@router.get("/readyz")
def readyz(services: ServicesDep) -> JSONResponse:
    try:
        with services.engine.connect() as conn:
            conn.execute(text("SELECT 1"))
    except SQLAlchemyError as exc:
        return JSONResponse({"status": "unavailable", "database": str(exc.__class__.__name__)}, status_code=503)
    return JSONResponse({"status": "ready"})

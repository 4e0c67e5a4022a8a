"""Every API error in one shape, made here and nowhere else: ``{"error": {"code", "message", "field"}}``.

``code`` is a short stable word a client may switch on (``not_found``, ``validation_failed``, ``conflict``, ...);
``message`` says what is wrong in words; ``field`` names the one field at fault (null when the error is not about a
field). Some errors carry more beside those three: the ingest 422 its ``errors`` list (sample index and field of
each problem), a validation error the ``location`` of its field (body, query, path, header), a version conflict the
``current_version``. Domain errors are translated here too; a third-party exception never leaks, and an internal
failure is logged with its context and answered 500 without a stack trace.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field
from sqlalchemy.exc import OperationalError
from starlette.exceptions import HTTPException as StarletteHTTPException

from alerting.rule_store import RuleNotFound
from collector.errors import BatchTooLarge, InvalidQuery, StorageUnavailable
from fleet.pools import PoolExists, PoolNotFound
from fleet.versions import VersionConflict
from isolation.tenants import QuotaNotFound, TenantExists, TenantNotFound
from wire.errors import FieldError, InvalidBatch

log = logging.getLogger(__name__)
RETRY_AFTER_SECONDS = "2"
MAX_LISTED_PROBLEMS = 100

# The stable codes, by HTTP status; a status not listed answers its own reason phrase in snake case.
CODES = {
    400: "bad_request",
    401: "unauthorized",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    409: "conflict",
    412: "precondition_failed",
    413: "payload_too_large",
    415: "unsupported_media_type",
    422: "validation_failed",
    429: "rate_limited",
    500: "internal",
    503: "unavailable",
}

# Domain refusals raised by the stores of other rooms, and the status each one is answered with.
NOT_FOUND: tuple[type[Exception], ...] = (PoolNotFound, TenantNotFound, QuotaNotFound, RuleNotFound)
CONFLICTS: tuple[type[Exception], ...] = (PoolExists, TenantExists, VersionConflict)


class ErrorBody(BaseModel):
    code: str = Field(description="a short stable word: not_found, validation_failed, conflict, ...")
    message: str
    field: str | None = Field(description="the field at fault; null when the error is not about one field")
    location: str | None = Field(None, description="where the field is: body, query, path or header")
    current_version: int | None = Field(None, description="a version conflict: the version the resource is at now")
    errors: list[dict[str, Any]] | None = Field(None, description="every problem found, when there are several")


class ErrorOut(BaseModel):
    """The answer of every refused or failed API request."""

    error: ErrorBody


# Declared on every router, so the OpenAPI says what each refusal looks like (400: a body that is not JSON).
ERROR_RESPONSES: dict[int | str, dict[str, Any]] = {
    status: {"model": ErrorOut, "description": code.replace("_", " ")}
    for status, code in CODES.items()
    if status in (400, 401, 403, 422, 429, 500, 503)
}


def error_responses(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """OpenAPI ``responses`` of a route's own refusals (``error_responses(404, 409)``), in the one error shape."""
    return {status: {"model": ErrorOut, "description": CODES[status].replace("_", " ")} for status in statuses}


class ApiError(Exception):
    """A refusal a route raises on purpose, answered as it is said here."""

    def __init__(
        self,
        status_code: int,
        message: str,
        *,
        field: str | None = None,
        headers: Mapping[str, str] | None = None,
        **extra: Any,
    ) -> None:
        super().__init__(message)
        self.status_code = status_code
        self.message = message
        self.field = field
        self.headers = dict(headers or {})
        self.extra = extra


def refused(exc: Exception) -> ApiError:
    """A store's refusal as an answer: missing 404, duplicate or stale 409, any other invalid value 422."""
    if isinstance(exc, NOT_FOUND):
        return ApiError(404, str(exc))
    if isinstance(exc, VersionConflict):  # every versioned resource's (pools, tenants, alert rules)
        return ApiError(409, str(exc), current_version=exc.current)
    if isinstance(exc, CONFLICTS):
        return ApiError(409, str(exc))
    return ApiError(422, str(exc), field=exc.field if isinstance(exc, FieldError) else None)


@contextmanager
def refusals() -> Iterator[None]:
    """A store's refusal (a ValueError) raised in the block leaves it as its answer (``refused``)."""
    try:
        yield
    except ValueError as exc:
        raise refused(exc) from None


def not_found(message: str) -> ApiError:
    return ApiError(404, message)


def error_response(
    status_code: int,
    message: str,
    *,
    field: str | None = None,
    headers: Mapping[str, str] | None = None,
    **extra: Any,
) -> JSONResponse:
    """The one place an error answer is built."""
    body: dict[str, Any] = {"code": CODES.get(status_code, f"http_{status_code}"), "message": message, "field": field}
    body.update({k: v for k, v in extra.items() if v is not None})
    return JSONResponse({"error": body}, status_code=status_code, headers=dict(headers or {}))


def _validation_response(problems: Sequence[Any]) -> JSONResponse:
    """The first failing field named with its location; every problem listed (up to 100)."""
    listed = [_problem(p) for p in problems[:MAX_LISTED_PROBLEMS]]
    first = listed[0] if listed else {"location": None, "field": None, "message": "invalid request"}
    where = f"{first['location']} " if first["location"] else ""
    named = f"{first['field']}: " if first["field"] else ""
    return error_response(
        422, f"{where}{named}{first['message']}", field=first["field"], location=first["location"], errors=listed
    )


def _problem(problem: Any) -> dict[str, Any]:
    """One pydantic error as ``{"location", "field", "message"}``: ``("body", "matchers", 0, "name")`` is
    location ``body``, field ``matchers[0].name``."""
    loc = list(problem.get("loc", ())) if isinstance(problem, Mapping) else []
    location = str(loc.pop(0)) if loc and loc[0] in ("body", "query", "path", "header", "cookie") else None
    field = ""
    for part in loc:
        field += f"[{part}]" if isinstance(part, int) else f".{part}" if field else str(part)
    message = str(problem.get("msg", problem)) if isinstance(problem, Mapping) else str(problem)
    raised = problem.get("ctx", {}).get("error") if isinstance(problem, Mapping) else None
    if isinstance(raised, FieldError) and not field:  # a model-level check names its field by raising FieldError
        field, message = raised.field, raised.message
    return {"location": location, "field": field or None, "message": message.removeprefix("Value error, ")}


def install_error_handlers(app: FastAPI) -> None:
    """Every error of the app answered in the one shape (the dashboard's pages install their own on top)."""

    @app.exception_handler(ApiError)
    async def api_error(_request: Request, exc: ApiError) -> JSONResponse:
        return error_response(exc.status_code, exc.message, field=exc.field, headers=exc.headers, **exc.extra)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(_request: Request, exc: StarletteHTTPException) -> JSONResponse:
        return error_response(exc.status_code, str(exc.detail), headers=exc.headers)

    @app.exception_handler(RequestValidationError)
    async def invalid_request(_request: Request, exc: RequestValidationError) -> JSONResponse:
        return _validation_response(exc.errors())

    for kind in (*NOT_FOUND, *CONFLICTS):
        app.add_exception_handler(kind, _domain_refusal)
    _install_collector_handlers(app)


async def _domain_refusal(_request: Request, exc: Exception) -> JSONResponse:
    error = refused(exc)
    return error_response(error.status_code, error.message, **error.extra)


def _install_collector_handlers(app: FastAPI) -> None:
    @app.exception_handler(InvalidBatch)
    async def invalid_batch(_request: Request, exc: InvalidBatch) -> JSONResponse:
        errors = [
            {"sample": p.sample, "field": p.field, "message": p.message} for p in exc.problems[:MAX_LISTED_PROBLEMS]
        ]
        first = exc.problems[0]
        field = f"samples[{first.sample}].{first.field}" if first.sample is not None else first.field
        return error_response(422, str(exc), field=field, location="body", errors=errors)

    @app.exception_handler(InvalidQuery)
    async def invalid_query(_request: Request, exc: InvalidQuery) -> JSONResponse:
        return error_response(422, str(exc), field=exc.field)

    @app.exception_handler(BatchTooLarge)
    async def too_large(_request: Request, exc: BatchTooLarge) -> JSONResponse:
        return error_response(413, str(exc))

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
        return error_response(500, "internal error; the server log has the details")


def _unavailable() -> JSONResponse:
    return error_response(503, "database unavailable; retry later", headers={"Retry-After": RETRY_AFTER_SECONDS})

"""``POST /api/v1/ingest``: the agents' samples in, acknowledged only after commit (CONTRACT section 5)."""

from __future__ import annotations

import time
from typing import Any

from fastapi import APIRouter, HTTPException, Request, status
from pydantic import BaseModel
from starlette.concurrency import run_in_threadpool

from collector.errors import BatchTooLarge, InvalidBatch, StorageUnavailable
from collector.telemetry import RejectReason
from collector.wire import parse_batch
from web.auth import ServicesDep, authenticate
from web.body import read_body
from web.tokens import Role

router = APIRouter(tags=["ingest"])


class IngestAnswer(BaseModel):
    accepted: int
    duplicates: int
    desired: dict[str, Any] | None


@router.post("/ingest", responses={401: {}, 403: {}, 413: {}, 422: {}, 503: {}})
async def ingest(request: Request, services: ServicesDep) -> IngestAnswer:
    """Store one batch of samples from an agent; a resent ``(node_id, seq)`` counts as a duplicate."""
    telemetry = services.telemetry
    started = time.perf_counter()
    code = status.HTTP_200_OK
    try:
        token = authenticate(services, request, Role.AGENT)
        body = await read_body(request, max_bytes=services.settings.ingest_max_body_bytes)
        settings = services.settings
        batch = parse_batch(
            body,
            now=services.clock(),
            max_samples=settings.ingest_max_samples,
            max_future_seconds=settings.ingest_max_future_seconds,
        )
        if batch.node_id != token.node_id:
            raise HTTPException(
                status.HTTP_403_FORBIDDEN,
                f"node_id {batch.node_id!r} is not this token's node ({token.node_id!r})",
            )
        result = await run_in_threadpool(services.writer.write_batch, batch, received_at=services.clock())
    except InvalidBatch:
        code = status.HTTP_422_UNPROCESSABLE_CONTENT
        telemetry.rejected.labels(RejectReason.INVALID.value).inc()
        raise
    except BatchTooLarge:
        code = status.HTTP_413_CONTENT_TOO_LARGE
        telemetry.rejected.labels(RejectReason.TOO_LARGE.value).inc()
        raise
    except StorageUnavailable:
        code = status.HTTP_503_SERVICE_UNAVAILABLE
        telemetry.database_errors.labels("ingest").inc()
        raise
    except HTTPException as exc:
        code = exc.status_code
        reason = RejectReason.UNAUTHORIZED if code == 401 else RejectReason.FORBIDDEN
        telemetry.rejected.labels(reason.value).inc()
        raise
    finally:
        telemetry.requests.labels(str(code)).inc()
    telemetry.samples.labels("accepted").inc(result.accepted)
    telemetry.samples.labels("duplicate").inc(result.duplicates)
    telemetry.duration.observe(time.perf_counter() - started)
    return IngestAnswer(
        accepted=result.accepted, duplicates=result.duplicates, desired=services.desired_state(batch.node_id)
    )

"""``POST /api/v1/ingest``: the agents' samples in, acknowledged only after commit (CONTRACT section 5)."""

from __future__ import annotations

import random
import time
from dataclasses import dataclass

from fastapi import APIRouter, HTTPException, Request, Response, status
from pydantic import BaseModel, Field
from starlette.concurrency import run_in_threadpool

from collector.batch import SampleBatch
from collector.batch_decode import decode_columns, decode_json
from collector.batch_rules import checked
from collector.errors import BatchTooLarge, Overloaded, StorageUnavailable
from collector.pool_bound import PoolBound
from collector.sample_age import without_old_samples
from collector.telemetry import RejectReason
from web.auth import ServicesDep, authenticate_on_loop, documented_machine_auth
from web.body import read_body
from web.errors import ERROR_RESPONSES, ApiError, error_responses
from web.ingest_gate import Shed
from web.services import AppServices
from web.tokens import Role, TokenInfo
from wire import columnar
from wire.control import DesiredState
from wire.errors import InvalidBatch
from wire.refusals import Refusal

router = APIRouter(tags=["ingest"], responses=ERROR_RESPONSES)
# Every answer offers the compact encoding: an agent that reads it sends its next batches so (wire.columnar).
ACCEPT_POST = f"application/json, {columnar.MEDIA_TYPE}"
# An overloaded server asks for a pause spread over a few seconds: the nodes refused in one second come back over
# several, with fuller spools (bigger batches cost less per sample); the agent waits at least this, or its backoff.
OVERLOADED_RETRY_AFTER_SECONDS = (2, 6)


class IngestAnswer(BaseModel):
    """The answer's shape (documented); the route writes it from the board's cached JSON of ``desired``, which
    leaves out every field that is unset (``exclude_none``): the agent reads its default for it."""

    accepted: int
    duplicates: int
    refused: list[Refusal] = Field(
        default_factory=list,
        description="samples not stored for a bound of the node (pools past it, too old), the rest stored; "
        "left out when none were",
    )
    desired: DesiredState | None = Field(description="what the node should run and enforce; null: nothing said")


@dataclass(frozen=True)
class _Stored:
    accepted: int
    duplicates: int
    refused: tuple[Refusal, ...]
    body: bytes  # the whole answer, IngestAnswer as JSON

    def response(self) -> Response:
        return Response(content=self.body, media_type="application/json", headers={"Accept-Post": ACCEPT_POST})


def _reject_reason(code: int) -> RejectReason:
    """401, and 429 for an address over the failed-authentication limit, refuse who asks; 403 what it asks; a bad
    Content-Encoding or gzip (400, 415) is an invalid body."""
    if code == status.HTTP_403_FORBIDDEN:
        return RejectReason.FORBIDDEN
    if code in (status.HTTP_401_UNAUTHORIZED, status.HTTP_429_TOO_MANY_REQUESTS):
        return RejectReason.UNAUTHORIZED
    if code == status.HTTP_503_SERVICE_UNAVAILABLE:
        return RejectReason.OVERLOADED
    return RejectReason.INVALID


@router.post(
    "/ingest", response_model=IngestAnswer, responses=error_responses(413), dependencies=[documented_machine_auth()]
)
async def ingest(request: Request, services: ServicesDep) -> Response:
    """Store one batch of samples from an agent; a resent ``(node_id, seq)`` counts as a duplicate."""
    telemetry = services.telemetry
    started = time.perf_counter()
    code = status.HTTP_200_OK
    entered_at: float | None = None
    try:
        token = await authenticate_on_loop(services, request, Role.AGENT)
        try:
            entered_at = services.ingest_gate.enter()
        except Shed as exc:
            raise overloaded(str(exc)) from None
        body = await read_body(request, max_bytes=services.settings.ingest_max_body_bytes)
        compact = _is_compact(request.headers.get("content-type", ""))
        answer = await run_in_threadpool(_store, services, token, body, compact, entered_at)
    except Overloaded as exc:
        code = status.HTTP_503_SERVICE_UNAVAILABLE
        telemetry.rejected.labels(RejectReason.OVERLOADED.value).inc()
        raise overloaded(str(exc)) from None
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
    except (ApiError, HTTPException) as exc:
        code = exc.status_code
        telemetry.rejected.labels(_reject_reason(code).value).inc()
        raise
    finally:
        if entered_at is not None:
            services.ingest_gate.leave(entered_at)
        telemetry.requests.labels(str(code)).inc()
    telemetry.samples.labels("accepted").inc(answer.accepted)
    telemetry.samples.labels("duplicate").inc(answer.duplicates)
    for refusal in answer.refused:
        telemetry.samples.labels(refusal.reason).inc(refusal.samples)
    telemetry.duration.observe(time.perf_counter() - started)
    return answer.response()


def overloaded(why: str) -> ApiError:
    """503 with a Retry-After spread over a few seconds (``OVERLOADED_RETRY_AFTER_SECONDS``)."""
    return ApiError(
        status.HTTP_503_SERVICE_UNAVAILABLE,
        f"overloaded: {why}; keep the samples and retry later",
        headers={"Retry-After": str(random.randint(*OVERLOADED_RETRY_AFTER_SECONDS))},
    )


def _is_compact(content_type: str) -> bool:
    """The compact encoding by its media type; anything else is read as JSON (curl's default form type too)."""
    return content_type.split(";", 1)[0].strip().lower() == columnar.MEDIA_TYPE


def _decode(services: AppServices, body: bytes, compact: bool) -> SampleBatch:
    """The body's batch, decoded and checked against every rule of the wire format (``InvalidBatch``: 422)."""
    settings = services.settings
    now = services.clock()
    ahead, replicas = settings.ingest_max_future_seconds, settings.node_max_replicas
    if compact:
        batch = decode_columns(body, max_samples=settings.ingest_max_samples)
    else:
        batch = decode_json(
            body, max_samples=settings.ingest_max_samples, now=now, max_future_seconds=ahead, max_replicas=replicas
        )
    return checked(batch, now=now, max_future_seconds=ahead, max_replicas=replicas)


def _store(services: AppServices, token: TokenInfo, body: bytes, compact: bool, entered_at: float) -> _Stored:
    """Decode, check, commit and answer, in one worker thread. Decoding is CPU-bound (on the event loop four 8 MB
    batches held /healthz 7 s); one hop rather than one per step, each of which cost the ingest bench about 5 % of
    its rate. The desired state is the board's cached JSON for the node (no database read, no computation: the
    control loops computed it when they decided)."""
    settings = services.settings
    batch = _decode(services, body, compact)
    if batch.node_id != token.node_id:
        raise ApiError(
            status.HTTP_403_FORBIDDEN, f"node_id {batch.node_id!r} is not this token's node ({token.node_id!r})"
        )
    batch, too_old = without_old_samples(
        batch, now=services.clock(), max_age_s=settings.ingest_sample_age_limit_seconds
    )
    pools = PoolBound(settings.ingest_max_pools_per_node, lambda: [p.name for p in services.pools.list()])
    result = services.writer.write_batch(batch, received_at=services.clock(), pools=pools, arrived=entered_at)
    refused = (too_old, *result.refused) if too_old is not None else result.refused
    desired = services.desired.for_node_json(batch.node_id)
    # "refused" only when something was: the answer of a push within its bounds stays the contract's example
    listed = b',"refused":[%s]' % b",".join(r.model_dump_json().encode() for r in refused) if refused else b""
    answer = b'{"accepted":%d,"duplicates":%d%s,"desired":%s}' % (result.accepted, result.duplicates, listed, desired)
    return _Stored(result.accepted, result.duplicates, refused, answer)

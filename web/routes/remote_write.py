"""``POST /api/v1/write`` (Prometheus remote write 1.0) and ``POST /api/v1/otlp/v1/metrics`` (OTLP/HTTP protobuf).

A team's Prometheus or OpenTelemetry collector sends what it scrapes; the mapping (``collector.remote.mapping``)
turns the series it knows into fleetpilot's samples. The answers follow what senders do with them: Prometheus
retries a 5xx (and honours ``Retry-After``) and drops a batch on any other 4xx, so overload is 503 + Retry-After,
a malformed body 400 (resending it cannot help), and points refused one by one (older than the window, another
value for a stored time) 400 after everything else of the request was stored. Unmapped series, stale markers and
series past a source's limit are counted (``fleetpilot_collector_remote_points_total``), not errors: resending
would not change them; they are listed by family (``GET /api/v1/unmapped-families``). OTLP answers an
``ExportMetricsServiceResponse``, with ``partial_success`` when data points were dropped, unmapped ones included, as
the OTLP/HTTP specification says: ``rejected_data_points`` counts them, ``error_message`` names why.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Awaitable, Callable

from fastapi import APIRouter, HTTPException, Request, Response, status
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceResponse
from starlette.concurrency import run_in_threadpool

from collector.errors import BatchTooLarge, StorageUnavailable
from collector.remote.node_admission import Sender
from collector.remote.otlp import InvalidOtlpBody, otlp_series, parse_otlp
from collector.remote.receiver import WriteOutcome
from collector.remote.series import RemoteSeries, SourceKind
from collector.remote.staging import Dropped
from collector.remote.unmapped import data_points
from collector.remote.wire_counts import WireBounds, WireLimitExceeded
from collector.remote.write_request import InvalidWriteRequest, decode_write_request
from collector.remote.write_request_v2 import CONTENT_TYPE as WRITE_V2_CONTENT_TYPE
from collector.remote.write_request_v2 import decode_write_request_v2
from web.auth import ServicesDep, authenticate_on_loop, documented_machine_auth
from web.body import read_body, read_raw_body
from web.errors import ERROR_RESPONSES, ApiError, error_responses
from web.ingest_gate import Shed
from web.remote_decodes import NoDecodeSlot
from web.routes.ingest import overloaded
from web.services import AppServices
from web.tokens import Role, TokenInfo

router = APIRouter(tags=["remote write"], responses=ERROR_RESPONSES)
# refused point by point: the sender is told (400) after the rest was stored
REFUSED = (
    Dropped.TOO_OLD,
    Dropped.TOO_NEW,
    Dropped.CONFLICT,
    Dropped.OUT_OF_RANGE,
    Dropped.BAD_NAME,
    Dropped.LABEL_TOO_LONG,
    Dropped.AGENT_NODE,
    Dropped.OUT_OF_SCOPE,
    Dropped.NODE_LIMIT,
)
PROTOBUF = "application/x-protobuf"
NAMED_FAMILIES = 10  # unmapped families an OTLP answer names; the rest are counted

Read = Callable[[int], Awaitable[bytes]]  # the body, at most this many bytes, its encoding checked
Decode = Callable[[bytes, WireBounds], tuple[list[RemoteSeries], dict[str, int]]]


@router.post(
    "/write",
    status_code=status.HTTP_204_NO_CONTENT,
    responses=error_responses(400, 413, 415),
    dependencies=[documented_machine_auth(Role.REMOTE_WRITE)],
    openapi_extra={"requestBody": {"content": {PROTOBUF: {"schema": {"type": "string", "format": "binary"}}}}},
)
async def remote_write(request: Request, services: ServicesDep) -> Response:
    """Prometheus remote write, a snappy-compressed ``prometheus.WriteRequest`` (1.0) or, by its Content-Type,
    ``io.prometheus.write.v2.Request`` (2.0); a resend stores nothing twice."""
    version = _remote_write_version(request.headers.get("content-type", ""))

    async def read(limit: int) -> bytes:
        encoding = request.headers.get("content-encoding", "").strip().lower()
        if encoding != "snappy":
            raise ApiError(status.HTTP_415_UNSUPPORTED_MEDIA_TYPE, f"Content-Encoding {encoding!r}: send snappy")
        if version is None:
            raise ApiError(
                status.HTTP_415_UNSUPPORTED_MEDIA_TYPE,
                f"Content-Type {request.headers.get('content-type', '')!r}: send {PROTOBUF} (remote write 1.0) or "
                f"{WRITE_V2_CONTENT_TYPE} (2.0)",
            )
        return await read_raw_body(request, max_bytes=limit)

    def decode(body: bytes, bounds: WireBounds) -> tuple[list[RemoteSeries], dict[str, int]]:
        limit = 4 * services.settings.ingest_max_body_bytes
        decoder = decode_write_request_v2 if version == 2 else decode_write_request
        series, histograms = decoder(body, max_decoded_bytes=limit, bounds=bounds)
        return series, {Dropped.UNCONVERTED.value: histograms} if histograms else {}

    outcome = await _receive(request, services, "remote_write", read, decode)
    # 2.0: what was written, on every answer about the body (a 2xx without them reads as a 1.0 receiver)
    written = (
        {
            "X-Prometheus-Remote-Write-Samples-Written": str(outcome.stored + outcome.duplicates),
            "X-Prometheus-Remote-Write-Histograms-Written": "0",
            "X-Prometheus-Remote-Write-Exemplars-Written": "0",
        }
        if version == 2
        else {}
    )
    refused = sum(outcome.dropped[r] for r in REFUSED)
    if refused:
        raise ApiError(status.HTTP_400_BAD_REQUEST, _refusal(outcome, refused), headers=written)
    return Response(status_code=status.HTTP_204_NO_CONTENT, headers=written)


def _remote_write_version(content_type: str) -> int | None:
    """1 or 2 by the Content-Type's ``proto`` parameter, as the 2.0 specification negotiates; None: neither."""
    media, *parameters = (part.strip() for part in content_type.split(";"))
    if media.lower() != PROTOBUF:
        return None
    proto = next((p.split("=", 1)[1].strip('"') for p in parameters if p.lower().startswith("proto=")), None)
    return {None: 1, "prometheus.WriteRequest": 1, "io.prometheus.write.v2.Request": 2}.get(proto)


@router.post(
    "/otlp/v1/metrics",
    response_class=Response,
    responses={
        200: {
            "description": "an ExportMetricsServiceResponse, with partial_success when points were dropped",
            "content": {PROTOBUF: {"schema": {"type": "string", "format": "binary"}}},
        },
        **error_responses(400, 413, 415),
    },
    dependencies=[documented_machine_auth(Role.REMOTE_WRITE)],
    openapi_extra={"requestBody": {"content": {PROTOBUF: {"schema": {"type": "string", "format": "binary"}}}}},
)
async def otlp_metrics(request: Request, services: ServicesDep) -> Response:
    """OTLP/HTTP metrics, protobuf (gzip or not): the same mapping as remote write."""

    async def read(limit: int) -> bytes:
        content_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
        if content_type != PROTOBUF:
            raise ApiError(status.HTTP_415_UNSUPPORTED_MEDIA_TYPE, f"Content-Type {content_type!r}: send {PROTOBUF}")
        return await read_body(request, max_bytes=limit)

    def decode(body: bytes, bounds: WireBounds) -> tuple[list[RemoteSeries], dict[str, int]]:
        converted = otlp_series(parse_otlp(body, bounds))
        return converted.series, {Dropped.UNCONVERTED.value: sum(converted.dropped.values())}

    outcome = await _receive(request, services, "otlp", read, decode)
    answer = ExportMetricsServiceResponse()
    unmapped = data_points(outcome.unmapped)
    refused = sum(n for reason, n in outcome.dropped.items() if reason != Dropped.UNMAPPED)
    if refused or unmapped:
        answer.partial_success.rejected_data_points = refused + sum(unmapped.values())
        said = [_unmapped(unmapped)] if unmapped else []
        answer.partial_success.error_message = "; ".join(said + ([_refusal(outcome, refused)] if refused else []))
    return Response(answer.SerializeToString(), media_type=PROTOBUF)


def _unmapped(points: Counter[str]) -> str:
    """``3 data points of 2 metric families no mapping source reads: app_queue_length (2), go_goroutines (1) (GET
    /api/v1/unmapped-families lists them)``: the most rejected first, at most ``NAMED_FAMILIES`` named."""
    named = ", ".join(f"{name} ({n})" for name, n in points.most_common(NAMED_FAMILIES))
    more = f" and {len(points) - NAMED_FAMILIES} more" if len(points) > NAMED_FAMILIES else ""
    return (
        f"{sum(points.values())} data points of {len(points)} metric families no mapping source reads: {named}{more} "
        "(GET /api/v1/unmapped-families lists them; the mapping is fleetpilot server --remote-write-mapping)"
    )


async def _receive(
    request: Request, services: AppServices, protocol: SourceKind, read: Read, decode: Decode
) -> WriteOutcome:
    """Authenticate, pass the door, read, decode and store: the steps both protocols share, each counted."""
    telemetry = services.remote_telemetry
    code = status.HTTP_200_OK
    entered_at: float | None = None
    try:
        token = await authenticate_on_loop(services, request, Role.REMOTE_WRITE)
        try:
            entered_at = services.ingest_gate.enter()
        except Shed as exc:
            raise overloaded(str(exc)) from None
        body = await read(services.settings.ingest_max_body_bytes)
        outcome = await run_in_threadpool(_store, services, protocol, decode, body, token)
    except (InvalidWriteRequest, InvalidOtlpBody) as exc:
        code = status.HTTP_400_BAD_REQUEST
        raise ApiError(code, str(exc)) from None
    except WireLimitExceeded as exc:
        code = status.HTTP_413_CONTENT_TOO_LARGE
        raise ApiError(code, str(exc)) from None
    except NoDecodeSlot as exc:
        code = status.HTTP_503_SERVICE_UNAVAILABLE
        raise overloaded(str(exc)) from None
    except BatchTooLarge:
        code = status.HTTP_413_CONTENT_TOO_LARGE
        raise
    except HTTPException as exc:  # a bad gzip (400), an encoding other than gzip (415)
        code = exc.status_code
        raise
    except StorageUnavailable:
        code = status.HTTP_503_SERVICE_UNAVAILABLE
        services.telemetry.database_errors.labels(protocol).inc()
        raise
    except ApiError as exc:
        code = exc.status_code
        raise
    finally:
        if entered_at is not None:
            services.ingest_gate.leave(entered_at)
        telemetry.requests.labels(protocol, str(code)).inc()
    telemetry.points.labels(protocol, "stored").inc(outcome.stored)
    telemetry.points.labels(protocol, "duplicate").inc(outcome.duplicates)
    for reason, n in outcome.dropped.items():
        telemetry.points.labels(protocol, reason).inc(n)
    telemetry.samples.labels(protocol).inc(outcome.samples)
    return outcome


def _store(services: AppServices, protocol: SourceKind, decode: Decode, body: bytes, token: TokenInfo) -> WriteOutcome:
    """Decode and store in one of the decode slots (``NoDecodeSlot`` when none is free): a decoded body is held
    until it is stored."""
    remote = services.remote
    with services.remote_decodes.slot():
        series, unconverted = decode(body, remote.limits.wire)
        limit = remote.limits.max_series_per_request
        if len(series) > limit:
            raise ApiError(
                status.HTTP_413_CONTENT_TOO_LARGE,
                f"{len(series)} series in one request, over remote_write_max_series_per_request ({limit})",
            )
        now = services.clock()
        sender = Sender(token.id, token.node_scope, services.tokens.agent_nodes(now=now))
        outcome = remote.write(series, received_at=now, kind=protocol, sender=sender)
    outcome.dropped.update(unconverted)
    return outcome


def _refusal(outcome: WriteOutcome, refused: int) -> str:
    """``3 points refused (1 bad_name, 2 conflict): bad_name: node name 'a/b' does not match …; 5 new points
    stored, 0 duplicates``: counts by reason (unmapped ones aside: they are no refusal), and the first of each reason
    that says what to fix."""
    reasons = ", ".join(f"{n} {r}" for r, n in sorted(outcome.dropped.items()) if n and r != Dropped.UNMAPPED)
    details = "".join(f"; {reason}: {detail}" for reason, detail in sorted(outcome.details.items()))
    return (
        f"{refused} points refused ({reasons}){details}; {outcome.stored} new points stored, "
        f"{outcome.duplicates} duplicates"
    )

"""KEDA's external scaler (``externalscaler.ExternalScaler``, trigger type ``external``) over the pools: KEDA's HPA
keeps the Deployment's replicas, fleetpilot gives it the number to size by (:mod:`autoscaler.keda.demand_signal`).

A ScaledObject names its pool in the trigger's metadata (``pool: NAME``). ``GetMetricSpec`` answers one metric per
pool, ``fleetpilot-<pool>`` (KEDA prefixes it with the trigger's ``s<index>-`` and strips that again before
``GetMetrics``), whose target is the pool's per-replica target; ``GetMetrics`` its value now; ``IsActive`` whether the
pool needs a replica; ``StreamIsActive`` the same, sent again whenever it changes. A stream holds a worker thread
for as long as it is open, so at most ``max_streams`` are (past it: RESOURCE_EXHAUSTED) and the server has
:data:`UNARY_WORKERS` threads more: KEDA's ``GetMetrics`` always finds one free.

Each call reads the pool, the fleet view and the stored forecast as the controller does (one
:func:`~autoscaler.controller.pool_context`). The pool's event log gets one ForecastStale event when its value falls
back to live demand (not one per call), and, for a dry-run pool, one event whenever the replicas KEDA would have
been asked for change: it is served the value that keeps its current replicas.
"""

from __future__ import annotations

import logging
import math
import re
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager

import grpc

from autoscaler.controller import pool_context
from autoscaler.keda import externalscaler_pb2 as pb
from autoscaler.keda import externalscaler_pb2_grpc as pb_grpc
from autoscaler.keda.demand_signal import (
    DemandSignal,
    NoCapacity,
    NoDemand,
    Source,
    demand_signal,
    pool_target,
)
from autoscaler.keda.tls import KedaTls
from autoscaler.policy.decision import PoolContext
from autoscaler.scaling_events import EventStore, ReasonCode, ScalingEvent
from fleet.pools import Mode, Pool, PoolStore
from fleet.scaling_log import Outcome
from fleet.view import FleetReader
from predictor.store import ForecastStore
from wire.control import NAME_PATTERN

log = logging.getLogger(__name__)

POOL_KEY = "pool"  # the ScaledObject trigger's metadata key naming the pool
ACTUATOR = "keda"  # the events' actuator and policy: KEDA's HPA acts on what this scaler serves
# Workers beyond the streams' for the unary calls: KEDA polls GetMetrics and IsActive one ScaledObject at a time per
# operator replica, so 4 serve 2 KEDA replicas with room for a slow database read.
UNARY_WORKERS = 4


def metric_name(pool: str) -> str:
    """The pool's metric as KEDA's scalers name theirs (``kedautil.NormalizeString``: lower case, ``/ . :`` → ``-``):
    pool ``Chat.v2`` → ``fleetpilot-chat-v2``."""
    return "fleetpilot-" + re.sub(r"[/.:]", "-", pool.lower())


class ScalerError(Exception):
    """A call answered with a gRPC status: its code and a message naming what is wrong."""

    def __init__(self, code: grpc.StatusCode, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


class KedaScaler(pb_grpc.ExternalScalerServicer):
    """The servicer; thread-safe (gRPC calls it from its pool). ``StreamIsActive`` re-reads every ``poll_seconds``."""

    def __init__(
        self,
        *,
        pools: PoolStore,
        fleet: FleetReader,
        forecasts: ForecastStore,
        events: EventStore,
        forecast_stale_after_seconds: float,
        poll_seconds: float,
        max_streams: int = 12,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.pools = pools
        self.fleet = fleet
        self.forecasts = forecasts
        self.events = events
        self.forecast_stale_after_seconds = forecast_stale_after_seconds
        self.poll_seconds = poll_seconds
        self.clock = clock
        self._lock = threading.Lock()
        self._sources: dict[str, Source] = {}  # pool → the source of the value last served
        self._would_serve: dict[str, int] = {}  # dry-run pool → the replicas last recorded as what KEDA would get
        self._closing = threading.Event()
        self.max_streams = max_streams
        self._streams = threading.BoundedSemaphore(max_streams)

    def close(self) -> None:
        """Ends the open streams (at shutdown, before the server stops)."""
        self._closing.set()

    def GetMetricSpec(self, request: pb.ScaledObjectRef, context: grpc.ServicerContext) -> pb.GetMetricSpecResponse:  # noqa: N802
        with _answering(context):
            pool = self._pool(request)
            target = pool_target(self._context(pool), pool.name)
            spec = pb.MetricSpec(metricName=metric_name(pool.name), targetSize=_whole(target), targetSizeFloat=target)
            return pb.GetMetricSpecResponse(metricSpecs=[spec])

    def GetMetrics(self, request: pb.GetMetricsRequest, context: grpc.ServicerContext) -> pb.GetMetricsResponse:  # noqa: N802
        with _answering(context):
            pool = self._pool(request.scaledObjectRef)
            name = metric_name(pool.name)
            if request.metricName != name:
                raise ScalerError(
                    grpc.StatusCode.INVALID_ARGUMENT,
                    f"metricName {request.metricName!r} is not pool {pool.name}'s metric ({name!r})",
                )
            value = self._serve(pool).value
            return pb.GetMetricsResponse(
                metricValues=[pb.MetricValue(metricName=name, metricValue=_whole(value), metricValueFloat=value)]
            )

    def IsActive(self, request: pb.ScaledObjectRef, context: grpc.ServicerContext) -> pb.IsActiveResponse:  # noqa: N802
        with _answering(context):
            return pb.IsActiveResponse(result=self._active(self._pool(request)))

    def StreamIsActive(  # noqa: N802
        self, request: pb.ScaledObjectRef, context: grpc.ServicerContext
    ) -> Iterator[pb.IsActiveResponse]:
        """The first answer at once, then one whenever it changes; ends at shutdown or when KEDA hangs up.
        RESOURCE_EXHAUSTED when ``max_streams`` are open already."""
        if not self._streams.acquire(blocking=False):
            context.abort(
                grpc.StatusCode.RESOURCE_EXHAUSTED,
                f"{self.max_streams} StreamIsActive streams are open already (keda_max_streams); retry later",
            )
        try:
            last: bool | None = None
            while context.is_active() and not self._closing.is_set():
                with _answering(context):
                    active = self._active(self._pool(request))
                if active != last:
                    yield pb.IsActiveResponse(result=active)
                    last = active
                self._closing.wait(self.poll_seconds)
        finally:
            self._streams.release()

    def _pool(self, ref: pb.ScaledObjectRef) -> Pool:
        name = ref.scalerMetadata.get(POOL_KEY, "")
        where = f"ScaledObject {ref.namespace[:63] or 'default'}/{ref.name[:253]}"  # Kubernetes' bounds
        if not name:
            raise ScalerError(
                grpc.StatusCode.INVALID_ARGUMENT, f"{where}: its trigger metadata names no pool (metadata: pool: NAME)"
            )
        if not re.fullmatch(NAME_PATTERN, name):
            raise ScalerError(
                grpc.StatusCode.INVALID_ARGUMENT, f"{where}: metadata pool {name[:140]!r} is not a pool name"
            )
        pool = self.pools.get(name)
        if pool is None:
            raise ScalerError(grpc.StatusCode.NOT_FOUND, f"{where}: no pool named {name!r}")
        return pool

    def _context(self, pool: Pool) -> PoolContext:
        now = self.clock()
        return pool_context(
            pool,
            self.fleet.read(now),
            self.forecasts,
            now,
            forecast_stale_after_seconds=self.forecast_stale_after_seconds,
        )

    def _active(self, pool: Pool) -> bool:
        """A pool with a minimum needs replicas whatever its demand; one without, when its served value asks for one
        (KEDA then scales the target to zero)."""
        return pool.spec.min_replicas > 0 or self._serve(pool).replicas > 0

    def _serve(self, pool: Pool) -> DemandSignal:
        """The pool's signal now, noted in its event log where it changed; dry-run: the value keeping its replicas."""
        ctx = self._context(pool)
        wanted = demand_signal(ctx, pool.name)
        dry_run = pool.spec.mode is Mode.DRY_RUN
        served = wanted.holding(ctx.current_replicas) if dry_run else wanted
        with self._lock:
            fell_back = wanted.source is Source.LIVE and self._sources.get(pool.name) is not Source.LIVE
            self._sources[pool.name] = wanted.source
            would_change = dry_run and self._would_serve.get(pool.name) != wanted.replicas
            if dry_run:
                self._would_serve[pool.name] = wanted.replicas
            else:
                self._would_serve.pop(pool.name, None)
        if fell_back or would_change:
            self.events.add(_event(pool, ctx, wanted, served, dry_run))
        return served


def _event(pool: Pool, ctx: PoolContext, wanted: DemandSignal, served: DemandSignal, dry_run: bool) -> ScalingEvent:
    if wanted.source is Source.LIVE:
        said = f"keda: {wanted.forecast_problem}; serving live demand {wanted.value:.4g}"
    else:
        said = f"keda: serving the forecast's upper bound {wanted.value:.4g} at now + {ctx.startup_seconds:.0f} s"
    reason = f"{said} against {wanted.target:.4g} per replica → {wanted.replicas} replicas"
    return ScalingEvent(
        pool=pool.name,
        ts=ctx.now,
        from_replicas=ctx.current_replicas,
        to_replicas=wanted.replicas,
        policy=ACTUATOR,
        reason=reason,
        inputs={
            "value": wanted.value,
            "target": wanted.target,
            "source": wanted.source.value,
            "served": served.value,
            "forecast_problem": wanted.forecast_problem,
        },
        outcome=Outcome.DRY_RUN if dry_run else Outcome.APPLIED,
        actuator=ACTUATOR,
        note=f"dry run: served {served.value:.4g}, which keeps {ctx.current_replicas} replicas" if dry_run else None,
        reason_code=ReasonCode.FORECAST_STALE if wanted.source is Source.LIVE else ReasonCode.FORECAST_PEAK,
    )


def _whole(value: float) -> int:
    """The deprecated int64 fields, for a KEDA older than the float ones: rounded up, so a fraction is not lost."""
    return math.ceil(value)


@contextmanager
def _answering(context: grpc.ServicerContext) -> Iterator[None]:
    """A failure as the gRPC status it is: a bad request, a missing pool, a pool with nothing to serve; any other
    error is logged and answered INTERNAL without its trace."""
    try:
        yield
    except ScalerError as error:
        context.abort(error.code, error.message)
    except NoCapacity as error:
        context.abort(grpc.StatusCode.FAILED_PRECONDITION, str(error))
    except NoDemand as error:
        context.abort(grpc.StatusCode.UNAVAILABLE, str(error))
    except Exception:
        log.exception("keda scaler: a call failed")
        context.abort(grpc.StatusCode.INTERNAL, "internal error; the server's log has the details")


class KedaServer:
    """The scaler served on ``host:port`` (port 0: a free one, read back from ``port``), started at construction:
    with ``tls`` only to clients with a certificate of its client CA, else in plain text."""

    def __init__(self, scaler: KedaScaler, host: str, port: int, *, tls: KedaTls | None = None) -> None:
        self.scaler = scaler
        workers = scaler.max_streams + UNARY_WORKERS  # 12 streams held: 4 workers still answer GetMetrics
        self.server = grpc.server(ThreadPoolExecutor(max_workers=workers, thread_name_prefix="keda"))
        pb_grpc.add_ExternalScalerServicer_to_server(scaler, self.server)  # type: ignore[no-untyped-call]
        address = f"{host}:{port}"
        if tls is None:
            self.port: int = self.server.add_insecure_port(address)
        else:
            self.port = self.server.add_secure_port(address, tls.credentials())
        if self.port == 0:
            raise OSError(f"keda scaler: cannot listen on {address}" + (" with its TLS certificate" if tls else ""))
        self.server.start()

    def stop(self, grace_seconds: float = 5.0) -> None:
        """Ends the streams, lets the calls in flight finish for up to ``grace_seconds``, then closes the port."""
        self.scaler.close()
        self.server.stop(grace_seconds).wait()

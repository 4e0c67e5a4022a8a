"""``/api/v1/pools``: list and read pools (viewer), create and delete them (admin), edit them (operator).

A GET answers the pool's ``ETag``; an edit, scale or delete with ``If-Match`` goes ahead only while the pool is still
at that version (else 412 with the current version), so two operators never overwrite each other silently. An
edit may instead carry the ``version`` it read in its body (409 when the pool changed since). Every change is
audited (``web.audit``). The replica counts are what the nodes that are up report, in the glossary's words
(docs/architecture.md): ``ready_replicas`` serve, ``starting_replicas`` are launched and not ready yet,
``draining_replicas`` finish their requests and take none, and ``current_replicas`` is ready + starting (what a
scale decision compares against); ``desired_replicas`` is what the autoscaler last decided (null until it has).

What a replica runs and where the local actuator may place it: ``engine`` (the built-in ``text`` or ``classify``, or
an engine profile the nodes declare in their ``--config``), ``model`` (one the profile lists; a built-in engine
takes none), ``gpus_per_replica``, ``gpu_memory_mib`` (each GPU a replica uses has at least this much) and
``node_selector`` (labels a node must carry, all of them). Where the kubernetes actuator scales it: ``scale_target``
(``apiVersion/kind/namespace/name`` of any object with a ``/scale`` subresource; null: the Deployment named after the
pool in ``kubernetes_namespace``); ``scaled_by`` names the HPA or KEDA ScaledObject found scaling that object instead.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Annotated, Any

from fastapi import APIRouter, Response, status
from pydantic import BaseModel, Field

from autoscaler.policy import PolicySettings
from fleet.desired.pools import PlacementStore
from fleet.pools import DemandMetric, Mode, Policy, Pool, PoolSpec, PoolStore, Provisioning
from fleet.scale_targets import MAX_SCALE_TARGET_LENGTH
from fleet.view import FleetView
from isolation.tenants import TenantStore
from predictor.store import SubjectKind
from web.audit import Auditor, AuditorDep
from web.auth import AdminToken, OperatorToken, ServicesDep, ViewerToken
from web.errors import ERROR_RESPONSES, ApiError, error_responses, not_found, refused
from web.etags import IfMatch, require_match, tag
from web.services import AppServices
from wire.control import MAX_LABELS, NAME_PATTERN, LabelKey, LabelValue, ModelName

router = APIRouter(tags=["pools"], responses=ERROR_RESPONSES)
# Bounds that keep every number inside the database's integer columns; no real pool comes near them.
MAX_REPLICAS = 100_000
MAX_GPUS_PER_REPLICA = 64  # what one replica may be given on the wire (wire.control.PoolDesired.gpus)
MAX_GPU_MEMORY_MIB = 10**9
# PATCH may set these to null: learn the capacity, no model (a built-in engine), any GPU memory
CLEARABLE = {"replica_capacity", "model", "gpu_memory_mib", "scale_target"}
ENGINE_DOC = (
    "the built-in `text` or `classify`, or an engine profile the nodes declare (their --config); null: a built-in "
    "engine, each node keeping the kind it runs the pool as (from its --pools), and `text` on a node new to it"
)
MODEL_DOC = "the model the engine profile serves (one it lists); null for a built-in engine"
GPU_MEMORY_DOC = "GPU memory each replica needs on every GPU it uses, MiB; null: any"
SELECTOR_DOC = "node labels a node must carry, all of them, to run the pool's replicas"
SCALE_TARGET_DOC = (
    "apiVersion/kind/namespace/name of the object whose /scale subresource the kubernetes actuator patches, e.g. "
    "apps/v1/Deployment/serving/llama-8b; null: the Deployment named after the pool in kubernetes_namespace"
)
Selector = Annotated[dict[LabelKey, LabelValue], Field(max_length=MAX_LABELS)]
LIVE_COUNTS = {"current_replicas", "ready_replicas", "starting_replicas", "draining_replicas"}


class Slo(BaseModel):
    model_config = {"allow_inf_nan": False}  # JSON numbers only: Infinity/NaN would not survive the answer

    latency_p99_seconds: float = Field(1.0, gt=0, description="the p99 end-to-end latency a replica must keep")


class Routing(BaseModel):
    """Routing weight = alpha·compute + beta·memory + gamma·network latency (normalised; lower is better)."""

    model_config = {"allow_inf_nan": False}

    alpha: float = Field(0.5, ge=0)
    beta: float = Field(0.3, ge=0)
    gamma: float = Field(0.2, ge=0)


class ManualOut(BaseModel):
    replicas: int
    until: float
    reason: str


class ProvisioningOut(BaseModel):
    band_scale: float | None = Field(
        description="the predictive bound is yhat + band_scale × the forecast band's upper half-width, adapted toward "
        "attainment_target; null: the policy has no forecast part"
    )
    attainment_target: float | None = Field(description="the attainment the band scale is adapted toward")
    startup_seconds: float = Field(description="the startup the policy looks ahead by")
    startup_measurements: int = Field(description="scale-ups it was measured over; 0: the configured startup")
    ts: float = Field(description="when the controller last changed it")
    wanted: int | None = Field(
        None,
        description="what the policy recommends where max_replicas or min_replicas holds it back (the pool is at max "
        "and wants this many); null: the recommendation is within them",
    )


class PoolFields(BaseModel):
    model_config = {"allow_inf_nan": False}  # JSON numbers only: Infinity/NaN would not survive the answer

    min_replicas: int = Field(1, ge=0, le=MAX_REPLICAS)
    max_replicas: int = Field(8, ge=1, le=MAX_REPLICAS)
    policy: Policy = Policy.HYBRID
    slo: Slo = Slo()
    replica_capacity: float | None = Field(
        None, gt=0, description="demand one replica sustains within the SLO (per second); null: learn it"
    )
    demand_metric: DemandMetric = DemandMetric.REQUESTS
    startup_seconds: float = Field(120.0, ge=0)
    gpus_per_replica: int = Field(1, ge=1, le=MAX_GPUS_PER_REPLICA)
    mode: Mode = Field(Mode.ACT, description="act: apply decisions; dry_run: decide and record only")
    routing: Routing = Routing()
    engine: Annotated[str, Field(pattern=NAME_PATTERN)] | None = Field(None, description=ENGINE_DOC)
    model: ModelName | None = Field(None, description=MODEL_DOC)
    gpu_memory_mib: int | None = Field(None, ge=1, le=MAX_GPU_MEMORY_MIB, description=GPU_MEMORY_DOC)
    node_selector: Selector = Field(default_factory=dict, description=SELECTOR_DOC)
    scale_target: str | None = Field(None, max_length=MAX_SCALE_TARGET_LENGTH, description=SCALE_TARGET_DOC)


class PoolIn(PoolFields):
    model_config = {
        "json_schema_extra": {
            "examples": [
                {
                    "name": "llama-8b",
                    "min_replicas": 1,
                    "max_replicas": 8,
                    "policy": "hybrid",
                    "slo": {"latency_p99_seconds": 1.5},
                    "replica_capacity": 40.0,
                    "startup_seconds": 90,
                    "engine": "vllm",
                    "model": "meta-llama/Llama-3.1-8B-Instruct",
                    "gpus_per_replica": 1,
                    "gpu_memory_mib": 40960,
                    "node_selector": {"zone": "eu-1"},
                }
            ]
        }
    }

    name: Annotated[str, Field(pattern=NAME_PATTERN)]


class PoolPatch(BaseModel):
    model_config = {
        "allow_inf_nan": False,
        "json_schema_extra": {"examples": [{"max_replicas": 12, "policy": "predictive"}]},
    }

    min_replicas: int | None = Field(None, ge=0, le=MAX_REPLICAS)
    max_replicas: int | None = Field(None, ge=1, le=MAX_REPLICAS)
    policy: Policy | None = None
    slo: Slo | None = None
    replica_capacity: float | None = Field(None, gt=0)
    demand_metric: DemandMetric | None = None
    startup_seconds: float | None = Field(None, ge=0)
    gpus_per_replica: int | None = Field(None, ge=1, le=MAX_GPUS_PER_REPLICA)
    mode: Mode | None = None
    routing: Routing | None = None
    engine: Annotated[str, Field(pattern=NAME_PATTERN, description=ENGINE_DOC)] | None = None
    model: ModelName | None = Field(None, description=MODEL_DOC)
    gpu_memory_mib: int | None = Field(None, ge=1, le=MAX_GPU_MEMORY_MIB, description=GPU_MEMORY_DOC)
    node_selector: Selector | None = Field(None, description=SELECTOR_DOC + " ({} for none)")
    scale_target: str | None = Field(None, max_length=MAX_SCALE_TARGET_LENGTH, description=SCALE_TARGET_DOC)
    version: int | None = Field(None, description="the version this edit is based on; 409 if the pool moved on")


class PoolOut(PoolIn):
    current_replicas: int = Field(description="ready + starting replicas on the nodes that are up")
    ready_replicas: int = Field(description="replicas serving, on the nodes that are up")
    starting_replicas: int = Field(description="replicas launched and not ready yet")
    draining_replicas: int = Field(description="replicas finishing their requests, taking none")
    desired_replicas: int | None
    manual: ManualOut | None = Field(None, description="a manual scale overriding the policy until `until`")
    scaled_by: str | None = Field(
        None, description="the HPA or KEDA ScaledObject that scales the scale target, so fleetpilot does not patch it"
    )
    provisioning: ProvisioningOut | None = Field(
        None, description="what the controller sizes the pool by besides its settings; null until it has decided it"
    )
    version: int
    created_at: float
    updated_at: float


class PoolPage(BaseModel):
    items: list[PoolOut]
    next: str | None = None


def _spec_changes(fields: dict[str, Any]) -> dict[str, Any]:
    """API field names → PoolSpec field names (``slo.latency_p99_seconds`` is ``slo_p99_seconds``)."""
    changes = dict(fields)
    slo = changes.pop("slo", None)
    if slo is not None:
        changes["slo_p99_seconds"] = slo["latency_p99_seconds"]
    routing = changes.pop("routing", None)
    if routing is not None:
        changes.update(routing_alpha=routing["alpha"], routing_beta=routing["beta"], routing_gamma=routing["gamma"])
    return changes


@dataclass(frozen=True)
class ReplicaCounts:
    ready: int = 0
    starting: int = 0
    draining: int = 0


def _out(pool: Pool, replicas: Mapping[str, ReplicaCounts], now: float) -> PoolOut:
    s = pool.spec
    manual = pool.manual_at(now)
    counts = replicas.get(pool.name, ReplicaCounts())
    return PoolOut(
        name=pool.name,
        min_replicas=s.min_replicas,
        max_replicas=s.max_replicas,
        policy=s.policy,
        slo=Slo(latency_p99_seconds=s.slo_p99_seconds),
        replica_capacity=s.replica_capacity,
        demand_metric=s.demand_metric,
        startup_seconds=s.startup_seconds,
        gpus_per_replica=s.gpus_per_replica,
        mode=s.mode,
        routing=Routing(alpha=s.routing_alpha, beta=s.routing_beta, gamma=s.routing_gamma),
        engine=s.engine,
        model=s.model,
        gpu_memory_mib=s.gpu_memory_mib,
        node_selector=dict(s.node_selector),
        scale_target=s.scale_target,
        current_replicas=counts.ready + counts.starting,
        ready_replicas=counts.ready,
        starting_replicas=counts.starting,
        draining_replicas=counts.draining,
        desired_replicas=pool.desired_replicas,
        manual=None
        if manual is None
        else ManualOut(replicas=manual.replicas, until=manual.until, reason=manual.reason),
        scaled_by=pool.scaled_by,
        provisioning=_provisioning_out(pool.provisioning),
        version=pool.version,
        created_at=pool.created_at,
        updated_at=pool.updated_at,
    )


def _provisioning_out(stored: Provisioning | None) -> ProvisioningOut | None:
    if stored is None:
        return None
    target = PolicySettings().attainment_target if stored.band_scale is not None else None
    return ProvisioningOut(
        band_scale=stored.band_scale,
        attainment_target=target,
        startup_seconds=stored.startup_seconds,
        startup_measurements=stored.startup_measurements,
        ts=stored.ts,
        wanted=stored.wanted,
    )


def replica_counts(fleet: FleetView) -> dict[str, ReplicaCounts]:
    """Each pool's ready, starting and draining replicas, summed over the up nodes."""
    sums: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0])
    for p in fleet.pools_on_nodes:
        counted = sums[p.pool]
        counted[0] += p.ready
        counted[1] += p.starting
        counted[2] += p.draining
    return {pool: ReplicaCounts(*counted) for pool, counted in sums.items()}


def _replicas(services: AppServices) -> dict[str, ReplicaCounts]:
    return replica_counts(services.fleet.read(services.clock()))


def _found(store: PoolStore, name: str) -> Pool:
    pool = store.get(name)
    if pool is None:
        raise not_found(f"no pool {name!r}")
    return pool


def _answer(pool: Pool, services: AppServices, response: Response) -> PoolOut:
    tag(response, pool.version)
    return _out(pool, _replicas(services), services.clock())


def _audited(pool: Pool, now: float) -> dict[str, Any]:
    """The pool as the audit log keeps it: its settings and version, without the live replica counts."""
    return _out(pool, {}, now).model_dump(mode="json", exclude=LIVE_COUNTS)


@router.get("/pools")
def list_pools(services: ServicesDep, _token: ViewerToken) -> PoolPage:
    replicas = _replicas(services)
    return PoolPage(items=[_out(p, replicas, services.clock()) for p in services.pools.list()])


@router.get("/pools/{name}", responses=error_responses(404))
def get_pool(name: str, services: ServicesDep, _token: ViewerToken, response: Response) -> PoolOut:
    return _answer(_found(services.pools, name), services, response)


@router.post("/pools", status_code=status.HTTP_201_CREATED, responses=error_responses(409))
def create_pool(
    body: PoolIn, services: ServicesDep, _token: AdminToken, audit: AuditorDep, response: Response
) -> PoolOut:
    now = services.clock()
    try:
        spec = PoolSpec(**_spec_changes(body.model_dump(exclude={"name"})))
        with audit.change("pool", "create", body.name) as change:
            pool = PoolStore(change.engine).create(body.name, spec, now=now)
            change.after = _audited(pool, now)
    except ValueError as exc:
        raise refused(exc) from None
    return _answer(pool, services, response)


def apply_pool_patch(
    audit: Auditor, name: str, body: PoolPatch, *, now: float, if_match: frozenset[int] | None = None
) -> Pool:
    """Edit a pool's settings, audited as ("pool", "update"): the API's PATCH and the dashboard's dry-run switch.

    Refusals are the API's: 404 unknown pool, 412 ``If-Match`` stale, 409 body ``version`` stale, 422 bad value.
    """
    fields = body.model_dump(exclude_unset=True, exclude={"version"})
    nulls = sorted(k for k, v in fields.items() if v is None and k not in CLEARABLE)
    if nulls:
        raise ApiError(status.HTTP_422_UNPROCESSABLE_CONTENT, f"{nulls[0]}: may not be null", field=nulls[0])
    try:
        with audit.change("pool", "update", name) as change:
            store = PoolStore(change.engine)
            before = _found(store, name)
            require_match(if_match, before.version, f"pool {name!r}")
            pool = store.update(name, _spec_changes(fields), now=now, expected_version=body.version)
            change.before, change.after = _audited(before, now), _audited(pool, now)
    except ValueError as exc:
        raise refused(exc) from None
    return pool


@router.patch("/pools/{name}", responses=error_responses(404, 409, 412))
def patch_pool(
    name: str,
    body: PoolPatch,
    services: ServicesDep,
    _token: OperatorToken,
    audit: AuditorDep,
    if_match: IfMatch,
    response: Response,
) -> PoolOut:
    pool = apply_pool_patch(audit, name, body, now=services.clock(), if_match=if_match)
    return _answer(pool, services, response)


@router.delete(
    "/pools/{name}",
    status_code=status.HTTP_204_NO_CONTENT,
    responses=error_responses(404, 412),
)
def delete_pool(name: str, services: ServicesDep, _token: AdminToken, audit: AuditorDep, if_match: IfMatch) -> Response:
    now = services.clock()
    with audit.change("pool", "delete", name) as change:
        store = PoolStore(change.engine)
        before = _found(store, name)
        require_match(if_match, before.version, f"pool {name!r}")
        store.delete(name)
        change.before = _audited(before, now)
    # what was kept for the pool goes with it, and the nodes still running it are told 0 until none does
    services.forecasts.forget(SubjectKind.POOL, name)
    PlacementStore(services.engine).retire(name, now=now)
    TenantStore(services.engine).forget_pool(name)
    services.enforcement.forget_pool(name)
    services.publish_tenants()  # the nodes drop its tenants' quotas and limits at their next push
    return Response(status_code=status.HTTP_204_NO_CONTENT)


class ScaleIn(BaseModel):
    model_config = {
        "allow_inf_nan": False,
        "json_schema_extra": {"examples": [{"replicas": 4, "reason": "launch traffic"}]},
    }

    replicas: int = Field(ge=0, le=MAX_REPLICAS)
    reason: str = Field("", max_length=500)
    duration_seconds: float | None = Field(
        None,
        gt=0,
        le=366 * 86_400,
        description="how long the manual scale overrides the policy (default: manual_scale_seconds)",
    )


def apply_pool_scale(
    audit: Auditor,
    name: str,
    body: ScaleIn,
    *,
    now: float,
    default_duration_seconds: float,
    if_match: frozenset[int] | None = None,
) -> Pool:
    """Scale by hand, audited as ("pool", "scale"): the API's ``/scale`` and the dashboard's scale form.

    The override's reason starts with the acting token's name, so the scaling-event log says who scaled.
    """
    caller = audit.caller
    duration = body.duration_seconds or default_duration_seconds
    reason = f"{caller.name or caller.id}: {body.reason}" if body.reason else f"{caller.name or caller.id}"
    try:
        with audit.change("pool", "scale", name) as change:
            store = PoolStore(change.engine)
            before = _found(store, name)
            require_match(if_match, before.version, f"pool {name!r}")
            pool = store.scale_manually(name, body.replicas, until=now + duration, reason=reason, now=now)
            change.before, change.after = _audited(before, now), _audited(pool, now)
    except ValueError as exc:
        raise refused(exc) from None
    return pool


@router.post("/pools/{name}/scale", responses=error_responses(404, 412))
def scale_pool(
    name: str,
    body: ScaleIn,
    services: ServicesDep,
    _caller: OperatorToken,
    audit: AuditorDep,
    if_match: IfMatch,
    response: Response,
) -> PoolOut:
    """Scale by hand: the controller applies ``replicas`` and the policy stands aside until the override ends."""
    pool = apply_pool_scale(
        audit,
        name,
        body,
        now=services.clock(),
        default_duration_seconds=services.settings.manual_scale_seconds,
        if_match=if_match,
    )
    return _answer(pool, services, response)

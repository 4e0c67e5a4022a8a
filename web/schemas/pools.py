"""The pools' API shapes: what a pool is created, edited and scaled with, and how it is answered (and audited).

The replica counts are what the nodes that are up report, in the glossary's words (docs/architecture.md):
``ready_replicas`` serve, ``starting_replicas`` are launched and not ready yet, ``draining_replicas`` finish their
requests and take none, and ``current_replicas`` is ready + starting (what a scale decision compares against);
``desired_replicas`` is what the autoscaler last decided (null until it has).

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

from pydantic import BaseModel, Field

from fleet.pools import (
    DEFAULT_SLO_ATTAINMENT,
    MAX_SLO_ATTAINMENT,
    MIN_SLO_ATTAINMENT,
    DemandMetric,
    Mode,
    Policy,
    Pool,
    Provisioning,
)
from fleet.scale_targets import MAX_SCALE_TARGET_LENGTH
from fleet.view import FleetView
from wire.control import MAX_LABELS, NAME_PATTERN, LabelKey, LabelValue, ModelName

# Bounds that keep every number inside the database's integer columns; no real pool comes near them.
MAX_REPLICAS = 100_000
MAX_GPUS_PER_REPLICA = 64  # what one replica may be given on the wire (wire.control.PoolDesired.gpus)
MAX_GPU_MEMORY_MIB = 10**9
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


class Slo(BaseModel):
    model_config = {"allow_inf_nan": False}  # JSON numbers only: Infinity/NaN would not survive the answer

    latency_p99_seconds: float = Field(1.0, gt=0, description="the p99 end-to-end latency a replica must keep")
    attainment: float = Field(
        DEFAULT_SLO_ATTAINMENT,
        ge=MIN_SLO_ATTAINMENT,
        le=MAX_SLO_ATTAINMENT,
        description="the share of time the ready replicas must carry the demand: the predictive policy sizes for "
        "the forecast's quantile at it (0.99: the demand carried 99 % of the time)",
    )


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
        description="the predictive bound is yhat + band_scale × (the forecast's quantile at attainment_target − "
        "yhat), adapted toward attainment_target (1: the quantile itself); null: the policy has no forecast part"
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


def spec_changes(fields: dict[str, Any]) -> dict[str, Any]:
    """API field names → PoolSpec field names (``slo.latency_p99_seconds`` is ``slo_p99_seconds``,
    ``slo.attainment`` ``slo_attainment``)."""
    changes = dict(fields)
    slo = changes.pop("slo", None)
    if slo is not None:  # a patch may name one of the two: the other stays as it is
        if "latency_p99_seconds" in slo:
            changes["slo_p99_seconds"] = slo["latency_p99_seconds"]
        if "attainment" in slo:
            changes["slo_attainment"] = slo["attainment"]
    routing = changes.pop("routing", None)
    if routing is not None:
        changes.update(routing_alpha=routing["alpha"], routing_beta=routing["beta"], routing_gamma=routing["gamma"])
    return changes


@dataclass(frozen=True)
class ReplicaCounts:
    ready: int = 0
    starting: int = 0
    draining: int = 0


def pool_out(pool: Pool, replicas: Mapping[str, ReplicaCounts], now: float) -> PoolOut:
    s = pool.spec
    manual = pool.manual_at(now)
    counts = replicas.get(pool.name, ReplicaCounts())
    return PoolOut(
        name=pool.name,
        min_replicas=s.min_replicas,
        max_replicas=s.max_replicas,
        policy=s.policy,
        slo=Slo(latency_p99_seconds=s.slo_p99_seconds, attainment=s.slo_attainment),
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
        provisioning=_provisioning_out(pool.provisioning, s.slo_attainment),
        version=pool.version,
        created_at=pool.created_at,
        updated_at=pool.updated_at,
    )


def _provisioning_out(stored: Provisioning | None, attainment: float) -> ProvisioningOut | None:
    if stored is None:
        return None
    target = attainment if stored.band_scale is not None else None
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

"""Pools: the unit the autoscaler scales and the predictor forecasts, stored with a version for safe edits.

A pool names a set of replicas of one model that the agents report under ``pool`` (CONTRACT section 4). Its
configuration says how far it may scale (``min_replicas``..``max_replicas``), how (``policy``), what it promises
(``slo_p99_seconds``), what one replica sustains (``replica_capacity``, in units of ``demand_metric`` per second;
None = learn it from the metrics) and how long a replica takes to become ready (``startup_seconds``). What a replica
runs and where: the ``engine`` (the built-in ``text`` or ``classify``, or an engine profile the nodes declare) with its
``model``, the GPUs each replica takes (``gpus_per_replica``, each with at least ``gpu_memory_mib``) and the node
labels a node must carry (``node_selector``). Where the kubernetes actuator finds its replicas: ``scale_target``
(``apiVersion/kind/namespace/name``, :mod:`fleet.scale_targets`; None: the Deployment named after the pool).
Every change bumps ``version``; an update that names the version it read fails when someone else changed the pool
meanwhile, so two operators editing one pool never overwrite each other silently. The controller also keeps there,
without a version bump, what it decides by (:class:`Provisioning`: the predictive bound's band scale and the
startup measured from the pool's scale-ups), so the dashboard shows it and a new leader carries it on.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from enum import StrEnum
from typing import Any

from sqlalchemy import JSON, Column, Double, Engine, Integer, RowMapping, String, Table, delete, insert, select, update

from collector.tables import metadata
from fleet.scale_targets import MAX_SCALE_TARGET_LENGTH, ScaleTarget
from fleet.versions import VersionConflict
from wire.builtin_engines import BUILTIN_ENGINES
from wire.control import LABEL_KEY_PATTERN, LABEL_VALUE_PATTERN, MAX_LABELS, MODEL_PATTERN, NAME_PATTERN
from wire.errors import FieldError


@dataclass(frozen=True)
class Coefficients:
    alpha: float = 0.5  # compute utilization
    beta: float = 0.3  # memory utilization
    gamma: float = 0.2  # network latency

    def __post_init__(self) -> None:
        values = (self.alpha, self.beta, self.gamma)
        if any(not math.isfinite(v) or v < 0 for v in values) or sum(values) <= 0:
            raise ValueError(f"alpha, beta, gamma: must be >= 0 and not all 0, got {values}")


class Policy(StrEnum):
    STATIC = "static"
    REACTIVE = "reactive"
    PREDICTIVE = "predictive"
    HYBRID = "hybrid"


class Mode(StrEnum):
    """``act``: the controller's decisions are applied; ``dry_run``: decided, recorded and exported, not applied."""

    ACT = "act"
    DRY_RUN = "dry_run"


class DemandMetric(StrEnum):
    """What a pool's demand is counted in: requests or generated tokens per second (both add up over replicas)."""

    REQUESTS = "request_rate_per_second"
    TOKENS = "token_throughput_per_second"


MAX_SCALED_BY_LENGTH = 300  # "KEDA ScaledObject <namespace>/<name>" with room to spare

pools = Table(
    "pools",
    metadata,
    Column("name", String(128), primary_key=True),
    Column("min_replicas", Integer, nullable=False),
    Column("max_replicas", Integer, nullable=False),
    Column("policy", String(16), nullable=False),
    Column("slo_p99_seconds", Double, nullable=False),
    Column("slo_attainment", Double, nullable=True),  # null on pools made before it: DEFAULT_SLO_ATTAINMENT
    Column("replica_capacity", Double, nullable=True),
    Column("demand_metric", String(64), nullable=False),
    Column("startup_seconds", Double, nullable=False),
    Column("gpus_per_replica", Integer, nullable=False),
    Column("engine", String(128), nullable=True),  # null on pools made before engines were named (PoolSpec.engine)
    Column("model", String(256), nullable=True),
    Column("gpu_memory_mib", Integer, nullable=True),
    Column("node_selector", JSON, nullable=True),  # null on pools made before selectors: none
    Column("scale_target", String(MAX_SCALE_TARGET_LENGTH), nullable=True),  # null: the Deployment named after it
    Column("mode", String(16), nullable=False),
    Column("routing_alpha", Double, nullable=False),
    Column("routing_beta", Double, nullable=False),
    Column("routing_gamma", Double, nullable=False),
    Column("desired_replicas", Integer, nullable=True),
    # A manual scale (POST /pools/{name}/scale) overrides the policy until manual_until.
    Column("manual_replicas", Integer, nullable=True),
    Column("manual_until", Double, nullable=True),
    Column("manual_reason", String(500), nullable=True),
    # What else scales the pool's target (an HPA or a KEDA ScaledObject), as the controller last found; null: nothing.
    Column("scaled_by", String(MAX_SCALED_BY_LENGTH), nullable=True),
    # What the controller last decided by (Provisioning.to_json); null: it has not decided the pool yet.
    Column("provisioning", JSON, nullable=True),
    Column("version", Integer, nullable=False),
    Column("created_at", Double, nullable=False),
    Column("updated_at", Double, nullable=False),
)


MAX_GPU_MEMORY_MIB = 10**9  # the wire's bound (wire.control.PoolDesired)
DEFAULT_SLO_ATTAINMENT = 0.99  # the demand carried by the ready replicas 99 % of the time
MIN_SLO_ATTAINMENT, MAX_SLO_ATTAINMENT = 0.5, 0.999


@dataclass(frozen=True)
class PoolSpec:
    """What an operator configures; validated on construction (ValueError naming the field)."""

    min_replicas: int = 1
    max_replicas: int = 8
    policy: Policy = Policy.HYBRID
    slo_p99_seconds: float = 1.0
    # the share of time the ready replicas carry the demand: what the predictive policy sizes for, its quantile
    slo_attainment: float = DEFAULT_SLO_ATTAINMENT
    replica_capacity: float | None = None
    demand_metric: DemandMetric = DemandMetric.REQUESTS
    startup_seconds: float = 120.0
    gpus_per_replica: int = 1
    mode: Mode = Mode.ACT
    # Routing weight = α·compute + β·memory + γ·network latency (autoscaler.routing), per pool.
    routing_alpha: float = 0.5
    routing_beta: float = 0.3
    routing_gamma: float = 0.2
    # a built-in engine (BUILTIN_ENGINES) or the name of an engine profile the nodes declare; None (no engine named,
    # and every pool made before engines were): a built-in one, each node keeps the kind it runs the pool as — from
    # its --pools, say — and a node new to it runs text
    engine: str | None = None
    model: str | None = None  # what the profile serves; a built-in engine takes none
    gpu_memory_mib: int | None = None  # each GPU a replica uses has at least this much; None: any
    node_selector: Mapping[str, str] = field(default_factory=dict)  # labels a node must carry, all of them
    scale_target: str | None = None  # apiVersion/kind/namespace/name of the kubernetes actuator's target

    def __post_init__(self) -> None:
        # Accept the enums' string values (from the database or JSON); an unknown one is a ValueError naming it.
        object.__setattr__(self, "policy", Policy(self.policy))
        object.__setattr__(self, "mode", Mode(self.mode))
        object.__setattr__(self, "demand_metric", DemandMetric(self.demand_metric))
        if self.min_replicas < 0:
            raise FieldError("min_replicas", f"must be >= 0, got {self.min_replicas}")
        if self.max_replicas < max(self.min_replicas, 1):
            raise FieldError(
                "max_replicas", f"must be >= 1 and >= min_replicas ({self.min_replicas}), got {self.max_replicas}"
            )
        if not (math.isfinite(self.slo_p99_seconds) and self.slo_p99_seconds > 0):
            raise FieldError("slo_p99_seconds", f"must be a positive number of seconds, got {self.slo_p99_seconds}")
        if not MIN_SLO_ATTAINMENT <= self.slo_attainment <= MAX_SLO_ATTAINMENT:
            raise FieldError(
                "slo_attainment",
                f"must be in [{MIN_SLO_ATTAINMENT}, {MAX_SLO_ATTAINMENT}], got {self.slo_attainment}",
            )
        capacity = self.replica_capacity
        if capacity is not None and not (math.isfinite(capacity) and capacity > 0):
            raise FieldError("replica_capacity", f"must be positive (or null to learn it), got {capacity}")
        if not (math.isfinite(self.startup_seconds) and self.startup_seconds >= 0):
            raise FieldError("startup_seconds", f"must be >= 0, got {self.startup_seconds}")
        Coefficients(self.routing_alpha, self.routing_beta, self.routing_gamma)  # raises naming the three
        if self.gpus_per_replica < 1:  # a CPU replica (the demo's) counts as one accelerator slot
            raise FieldError("gpus_per_replica", f"must be >= 1, got {self.gpus_per_replica}")
        self._check_engine()
        object.__setattr__(self, "node_selector", _selector(self.node_selector))
        if self.scale_target is not None:
            ScaleTarget.parse(self.scale_target)  # raises naming the malformed part

    @property
    def builtin(self) -> bool:
        """Whether the pool runs a built-in engine (``kind`` on the wire) rather than a declared profile."""
        return self.engine is None or self.engine in BUILTIN_ENGINES

    def _check_engine(self) -> None:
        if self.engine is not None and not re.fullmatch(NAME_PATTERN, self.engine):
            raise FieldError("engine", f"not a valid engine name: {self.engine!r}")
        if self.model is not None and not re.fullmatch(MODEL_PATTERN, self.model):
            raise FieldError("model", f"not a valid model name: {self.model!r}")
        if self.builtin and self.model is not None:
            raise FieldError("model", f"the built-in engine {self.engine!r} takes no model (name an engine profile)")
        if self.gpu_memory_mib is not None and not 1 <= self.gpu_memory_mib <= MAX_GPU_MEMORY_MIB:
            raise FieldError("gpu_memory_mib", f"must be 1..{MAX_GPU_MEMORY_MIB} (or null), got {self.gpu_memory_mib}")


def _selector(labels: Mapping[str, str] | None) -> dict[str, str]:
    """The node selector checked against the label patterns nodes report with; null (a row from before) is none."""
    found = dict(labels or {})
    if len(found) > MAX_LABELS:
        raise FieldError("node_selector", f"at most {MAX_LABELS} labels, got {len(found)}")
    for key, value in found.items():
        if not isinstance(key, str) or not re.fullmatch(LABEL_KEY_PATTERN, key):
            raise FieldError("node_selector", f"not a valid label key: {key!r}")
        if not isinstance(value, str) or not re.fullmatch(LABEL_VALUE_PATTERN, value):
            raise FieldError("node_selector", f"label {key}: not a valid label value: {value!r}")
    return dict(sorted(found.items()))


SPEC_FIELDS: tuple[str, ...] = tuple(f.name for f in fields(PoolSpec))


def coefficients(spec: PoolSpec) -> Coefficients:
    return Coefficients(spec.routing_alpha, spec.routing_beta, spec.routing_gamma)


@dataclass(frozen=True)
class ManualScale:
    replicas: int
    until: float
    reason: str


@dataclass(frozen=True)
class Provisioning:
    """What the controller sizes a pool by besides its spec: the predictive bound's band scale (None: the pool's
    policy has no forecast part) and the startup it looks ahead, measured over ``startup_measurements`` scale-ups
    (0: the configured one), as of ``ts``; and ``wanted``, what the policy recommended where the pool's
    max_replicas or min_replicas held it back (None: the recommendation was within them)."""

    band_scale: float | None
    startup_seconds: float
    startup_measurements: int
    ts: float
    wanted: int | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "band_scale": self.band_scale,
            "startup_seconds": self.startup_seconds,
            "startup_measurements": self.startup_measurements,
            "ts": self.ts,
            "wanted": self.wanted,
        }

    @classmethod
    def from_json(cls, body: Mapping[str, Any]) -> Provisioning:
        scale = body.get("band_scale")
        return cls(
            None if scale is None else float(scale),
            float(body["startup_seconds"]),
            int(body["startup_measurements"]),
            float(body["ts"]),
            None if body.get("wanted") is None else int(body["wanted"]),
        )


@dataclass(frozen=True)
class Pool:
    name: str
    spec: PoolSpec
    desired_replicas: int | None
    version: int
    created_at: float
    updated_at: float
    manual: ManualScale | None = None
    scaled_by: str | None = None  # the HPA or ScaledObject that scales the target, as the controller last found
    provisioning: Provisioning | None = None  # what the controller last decided by

    def manual_at(self, now: float) -> ManualScale | None:
        """The manual override still in force at ``now``, if any."""
        return self.manual if self.manual is not None and now < self.manual.until else None

    @property
    def applies_desired(self) -> bool:
        """:func:`applies_desired` of this pool."""
        return applies_desired(self.spec.mode, self.scaled_by)


def applies_desired(mode: Mode, scaled_by: str | None) -> bool:
    """Whether the pool's replicas are driven to fleetpilot's desired count: not in dry run (decided and recorded
    only) and with no HPA or KEDA ScaledObject owning the target's count (fleetpilot's count is advice there, or the
    metric KEDA reads). Where it is not, ready ≠ desired by design: nothing is stuck (the ScalingStuck alert)."""
    return Mode(mode) is Mode.ACT and scaled_by is None


class PoolNotFound(LookupError):
    pass


class PoolExists(ValueError):
    pass


def _pool(row: RowMapping) -> Pool:
    values = {name: row[name] for name in SPEC_FIELDS}
    if values["slo_attainment"] is None:  # a pool made before it was a setting
        values["slo_attainment"] = DEFAULT_SLO_ATTAINMENT
    spec = PoolSpec(**values)
    manual = None
    if row["manual_replicas"] is not None and row["manual_until"] is not None:
        manual = ManualScale(row["manual_replicas"], row["manual_until"], row["manual_reason"] or "")
    return Pool(
        row["name"],
        spec,
        row["desired_replicas"],
        row["version"],
        row["created_at"],
        row["updated_at"],
        manual,
        row["scaled_by"],
        None if row["provisioning"] is None else Provisioning.from_json(row["provisioning"]),
    )


def _columns(spec: PoolSpec) -> dict[str, Any]:
    values = {name: getattr(spec, name) for name in SPEC_FIELDS}
    values["policy"] = spec.policy.value
    values["demand_metric"] = spec.demand_metric.value
    values["mode"] = spec.mode.value
    values["node_selector"] = dict(spec.node_selector)
    return values


class PoolStore:
    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def list(self) -> list[Pool]:
        with self.engine.connect() as conn:
            return [_pool(r._mapping) for r in conn.execute(select(pools).order_by(pools.c.name))]

    def get(self, name: str) -> Pool | None:
        with self.engine.connect() as conn:
            row = conn.execute(select(pools).where(pools.c.name == name)).first()
        return None if row is None else _pool(row._mapping)

    def create(self, name: str, spec: PoolSpec, *, now: float) -> Pool:
        with self.engine.begin() as conn:
            if conn.execute(select(pools.c.name).where(pools.c.name == name)).first() is not None:
                raise PoolExists(f"pool {name!r} already exists")
            conn.execute(insert(pools).values(name=name, **_columns(spec), version=1, created_at=now, updated_at=now))
        return Pool(name, spec, None, 1, now, now)

    def update(self, name: str, changes: Mapping[str, Any], *, now: float, expected_version: int | None = None) -> Pool:
        """Apply ``changes`` (spec fields, validated together with the rest) atomically; compare-and-set on version."""
        unknown = set(changes) - set(SPEC_FIELDS)
        if unknown:
            raise FieldError(sorted(unknown)[0], "not a pool setting")
        with self.engine.begin() as conn:
            row = conn.execute(select(pools).where(pools.c.name == name).with_for_update()).first()
            if row is None:
                raise PoolNotFound(f"no pool {name!r}")
            pool = _pool(row._mapping)
            if expected_version is not None and expected_version != pool.version:
                raise VersionConflict("pool", name, expected_version, pool.version)
            spec = replace(pool.spec, **changes)
            done = conn.execute(
                update(pools)
                .where(pools.c.name == name, pools.c.version == pool.version)
                .values(**_columns(spec), version=pool.version + 1, updated_at=now)
            )
            if done.rowcount != 1:  # a concurrent writer won between our read and write
                raise VersionConflict("pool", name, pool.version, pool.version + 1)
        return replace(pool, spec=spec, version=pool.version + 1, updated_at=now)

    def set_desired(self, name: str, replicas: int) -> None:
        """The controller's decision (not an operator edit: the version stays)."""
        with self.engine.begin() as conn:
            conn.execute(update(pools).where(pools.c.name == name).values(desired_replicas=replicas))

    def set_scaled_by(self, name: str, owner: str | None) -> None:
        """What the controller found scaling the pool's target instead of it (None: nothing); the version stays."""
        with self.engine.begin() as conn:
            conn.execute(update(pools).where(pools.c.name == name).values(scaled_by=owner))

    def set_provisioning(self, name: str, provisioning: Provisioning) -> None:
        """What the controller decides the pool by now (not an operator edit: the version stays)."""
        with self.engine.begin() as conn:
            conn.execute(update(pools).where(pools.c.name == name).values(provisioning=provisioning.to_json()))

    def scale_manually(self, name: str, replicas: int, *, until: float, reason: str, now: float) -> Pool:
        """Override the policy with ``replicas`` until ``until``; bumps the version like any operator edit."""
        with self.engine.begin() as conn:
            row = conn.execute(select(pools).where(pools.c.name == name).with_for_update()).first()
            if row is None:
                raise PoolNotFound(f"no pool {name!r}")
            pool = _pool(row._mapping)
            low, high = pool.spec.min_replicas, pool.spec.max_replicas
            if not low <= replicas <= high:
                raise FieldError("replicas", f"{replicas} is outside the pool's range {low}..{high}")
            manual = ManualScale(replicas, until, reason[:500])
            conn.execute(
                update(pools)
                .where(pools.c.name == name)
                .values(
                    manual_replicas=replicas,
                    manual_until=until,
                    manual_reason=manual.reason,
                    version=pool.version + 1,
                    updated_at=now,
                )
            )
        return replace(pool, manual=manual, version=pool.version + 1, updated_at=now)

    def delete(self, name: str) -> bool:
        with self.engine.begin() as conn:
            return conn.execute(delete(pools).where(pools.c.name == name)).rowcount == 1

"""Tenants: who sends requests, what latency they are promised (SLO class) and their quotas on each pool.

A quota limits one tenant on one pool: GPU memory pinned and SM share per replica (enforced by MPS), requests in
flight, requests and generated tokens per second. Every write is checked (isolation.validation) against the other
tenants of the pools it touches before anything is stored, and bumps the tenant's ``version``; an edit that names
the version it read fails when someone else changed the tenant meanwhile. Deleting a tenant deletes its quotas and
its API keys.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any

from sqlalchemy import (
    Column,
    Connection,
    Double,
    Engine,
    Integer,
    Row,
    String,
    Table,
    delete,
    func,
    insert,
    select,
    update,
)

from collector.tables import devices, metadata
from fleet.versions import VersionConflict
from isolation.validation import check_quotas
from wire.control import SloClass
from wire.errors import FieldError

MIB = 1 << 20
MPS_MEMORY_STEP_MIB = 128
MAX_GPU_MEMORY_MIB = 10**9  # the agent's bound too; a multiple of 128, so rounding up never passes it
MAX_CONCURRENCY = 1_000_000


tenants = Table(
    "tenants",
    metadata,
    Column("name", String(128), primary_key=True),
    Column("slo_class", String(32), nullable=False),
    Column("version", Integer, nullable=False),
    Column("created_at", Double, nullable=False),
    Column("updated_at", Double, nullable=False),
)

# No foreign key: the store deletes a tenant's quotas with it, in the same transaction, on every database.
tenant_quotas = Table(
    "tenant_quotas",
    metadata,
    Column("tenant", String(128), primary_key=True),
    Column("pool", String(128), primary_key=True),
    Column("gpu_memory_mib", Integer, nullable=True),
    Column("active_thread_percentage", Integer, nullable=True),
    Column("max_concurrency", Integer, nullable=True),
    Column("rate_rps", Double, nullable=True),
    Column("tokens_per_second", Double, nullable=True),
)

# A tenant's API keys for the serving front ends (isolation.tenant_keys): only the SHA-256 digest of each is kept.
tenant_api_keys = Table(
    "tenant_api_keys",
    metadata,
    Column("id", String(32), primary_key=True),
    Column("tenant", String(128), nullable=False, index=True),
    Column("name", String(255), nullable=False),
    Column("prefix", String(32), nullable=False),
    Column("key_hash", String(64), nullable=False, unique=True),
    Column("created_at", Double, nullable=False),
)


def round_up_to_mps_step(mib: int) -> int:
    """MPS pins device memory in 128 MiB steps, so a limit is rounded up to one: 1 → 128, 128 → 128, 129 → 256."""
    return -(-mib // MPS_MEMORY_STEP_MIB) * MPS_MEMORY_STEP_MIB


@dataclass(frozen=True)
class QuotaSpec:
    """One tenant's limits on one pool (None = no limit); validated on construction (ValueError naming the field).

    ``gpu_memory_mib`` is rounded up to MPS's 128 MiB step: 1000 is stored, answered and enforced as 1024.
    """

    gpu_memory_mib: int | None = None
    active_thread_percentage: int | None = None
    max_concurrency: int | None = None
    rate_rps: float | None = None
    tokens_per_second: float | None = None

    def __post_init__(self) -> None:
        memory = self.gpu_memory_mib
        if memory is not None:
            if not 1 <= memory <= MAX_GPU_MEMORY_MIB:
                raise FieldError("gpu_memory_mib", f"from 1 to {MAX_GPU_MEMORY_MIB} MiB, got {memory}")
            object.__setattr__(self, "gpu_memory_mib", round_up_to_mps_step(memory))
        threads = self.active_thread_percentage
        if threads is not None and not 1 <= threads <= 100:
            raise FieldError("active_thread_percentage", f"from 1 to 100, got {threads}")
        concurrency = self.max_concurrency
        if concurrency is not None and not 1 <= concurrency <= MAX_CONCURRENCY:
            raise FieldError("max_concurrency", f"from 1 to {MAX_CONCURRENCY}, got {concurrency}")
        for name in ("rate_rps", "tokens_per_second"):
            rate = getattr(self, name)
            if rate is not None and not (math.isfinite(rate) and rate > 0):
                raise FieldError(name, f"a positive number or null, got {rate}")


QUOTA_FIELDS: tuple[str, ...] = tuple(f.name for f in fields(QuotaSpec))


@dataclass(frozen=True)
class Tenant:
    name: str
    slo_class: SloClass
    version: int
    created_at: float
    updated_at: float
    quotas: Mapping[str, QuotaSpec] = field(default_factory=dict)  # by pool


class TenantNotFound(LookupError):
    pass


class QuotaNotFound(LookupError):
    pass


class TenantExists(ValueError):
    pass


def _quota(row: Row[Any]) -> QuotaSpec:
    return QuotaSpec(**{name: row._mapping[name] for name in QUOTA_FIELDS})


def _quota_columns(spec: QuotaSpec) -> dict[str, Any]:
    return {name: getattr(spec, name) for name in QUOTA_FIELDS}


def _tenant(row: Row[Any], quotas: Mapping[str, QuotaSpec]) -> Tenant:
    m = row._mapping
    return Tenant(m["name"], SloClass(m["slo_class"]), m["version"], m["created_at"], m["updated_at"], dict(quotas))


def _load(conn: Connection, name: str) -> Tenant:
    row = conn.execute(select(tenants).where(tenants.c.name == name)).first()
    if row is None:
        raise TenantNotFound(f"no tenant {name!r}")
    quotas = conn.execute(select(tenant_quotas).where(tenant_quotas.c.tenant == name))
    return _tenant(row, {q.pool: _quota(q) for q in quotas})


def _check(conn: Connection, tenant: str, slo_class: SloClass, quotas: Mapping[str, QuotaSpec]) -> None:
    """Check the pools of ``tenant`` as they would be with its class and quotas replaced by these.

    Every tenant row is locked first, so two edits of different tenants on one pool are checked one after the
    other and cannot overfill the pool together (PostgreSQL; SQLite runs one writer at a time anyway).
    """
    classes = {r.name: SloClass(r.slo_class) for r in conn.execute(select(tenants).with_for_update())}
    classes[tenant] = slo_class
    others = select(tenant_quotas).where(tenant_quotas.c.pool.in_(list(quotas)), tenant_quotas.c.tenant != tenant)
    resulting = {(r.tenant, r.pool): _quota(r) for r in conn.execute(others)}
    resulting.update({(tenant, pool): quota for pool, quota in quotas.items()})
    # Any pool may be placed on any node, so the smallest GPU a pool can run on is the fleet's smallest.
    smallest = conn.execute(select(func.min(devices.c.memory_total_bytes))).scalar()
    gpu_mib = {} if smallest is None else dict.fromkeys(quotas, int(smallest) // MIB)
    check_quotas(resulting, classes, gpu_mib)


class TenantStore:
    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def list(self) -> list[Tenant]:
        with self.engine.connect() as conn:
            quotas: dict[str, dict[str, QuotaSpec]] = defaultdict(dict)
            for q in conn.execute(select(tenant_quotas)):
                quotas[q.tenant][q.pool] = _quota(q)
            rows = conn.execute(select(tenants).order_by(tenants.c.name))
            return [_tenant(r, quotas[r.name]) for r in rows]

    def get(self, name: str) -> Tenant | None:
        with self.engine.connect() as conn:
            try:
                return _load(conn, name)
            except TenantNotFound:
                return None

    def create(self, name: str, slo_class: SloClass, quotas: Mapping[str, QuotaSpec], *, now: float) -> Tenant:
        with self.engine.begin() as conn:
            if conn.execute(select(tenants.c.name).where(tenants.c.name == name)).first() is not None:
                raise TenantExists(f"tenant {name!r} already exists")
            _check(conn, name, slo_class, quotas)
            conn.execute(
                insert(tenants).values(name=name, slo_class=slo_class.value, version=1, created_at=now, updated_at=now)
            )
            for pool, quota in quotas.items():
                conn.execute(insert(tenant_quotas).values(tenant=name, pool=pool, **_quota_columns(quota)))
        return Tenant(name, slo_class, 1, now, now, dict(quotas))

    def update(self, name: str, slo_class: SloClass, *, now: float, expected_version: int | None = None) -> Tenant:
        """Change the SLO class (checked: batch → standard makes its SM share count as guaranteed)."""
        with self.engine.begin() as conn:
            tenant = _load(conn, name)
            _check(conn, name, slo_class, tenant.quotas)
            return self._bump(conn, tenant, now, expected_version, slo_class=slo_class.value)

    def put_quota(
        self, name: str, pool: str, quota: QuotaSpec, *, now: float, expected_version: int | None = None
    ) -> Tenant:
        """Set (create or replace) the tenant's quota on ``pool``, checked with the pool's other tenants."""
        with self.engine.begin() as conn:
            tenant = _load(conn, name)
            quotas = {**tenant.quotas, pool: quota}
            _check(conn, name, tenant.slo_class, quotas)
            bumped = self._bump(conn, tenant, now, expected_version)
            where = (tenant_quotas.c.tenant == name, tenant_quotas.c.pool == pool)
            conn.execute(delete(tenant_quotas).where(*where))
            conn.execute(insert(tenant_quotas).values(tenant=name, pool=pool, **_quota_columns(quota)))
        return Tenant(name, bumped.slo_class, bumped.version, bumped.created_at, now, quotas)

    def delete_quota(self, name: str, pool: str, *, now: float) -> Tenant:
        """Remove the tenant's quota on ``pool`` (it falls back to the agent's defaults there); never over-commits."""
        with self.engine.begin() as conn:
            tenant = _load(conn, name)
            if pool not in tenant.quotas:
                raise QuotaNotFound(f"tenant {name!r} has no quota on pool {pool!r}")
            bumped = self._bump(conn, tenant, now, None)
            conn.execute(delete(tenant_quotas).where(tenant_quotas.c.tenant == name, tenant_quotas.c.pool == pool))
        quotas = {p: q for p, q in tenant.quotas.items() if p != pool}
        return Tenant(name, bumped.slo_class, bumped.version, bumped.created_at, now, quotas)

    def delete(self, name: str) -> bool:
        """Delete the tenant, its quotas and its keys; False when there was no such tenant."""
        with self.engine.begin() as conn:
            conn.execute(delete(tenant_quotas).where(tenant_quotas.c.tenant == name))
            conn.execute(delete(tenant_api_keys).where(tenant_api_keys.c.tenant == name))
            return conn.execute(delete(tenants).where(tenants.c.name == name)).rowcount == 1

    def forget_pool(self, pool: str) -> None:
        """Delete every tenant's quota on ``pool`` (the pool was deleted)."""
        with self.engine.begin() as conn:
            conn.execute(delete(tenant_quotas).where(tenant_quotas.c.pool == pool))

    @staticmethod
    def _bump(conn: Connection, tenant: Tenant, now: float, expected: int | None, **values: Any) -> Tenant:
        """Write ``values`` and the next version if the tenant is still at ``expected`` (compare-and-set)."""
        if expected is not None and expected != tenant.version:
            raise VersionConflict("tenant", tenant.name, expected, tenant.version)
        done = conn.execute(
            update(tenants)
            .where(tenants.c.name == tenant.name, tenants.c.version == tenant.version)
            .values(**values, version=tenant.version + 1, updated_at=now)
        )
        if done.rowcount != 1:  # a concurrent writer won between our read and write
            raise VersionConflict("tenant", tenant.name, tenant.version, tenant.version + 1)
        slo_class = SloClass(values.get("slo_class", tenant.slo_class))
        return Tenant(tenant.name, slo_class, tenant.version + 1, tenant.created_at, now, tenant.quotas)

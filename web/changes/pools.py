"""Pool changes: create (admin), edit and scale by hand (operator), delete (admin) with what was kept for the pool.

Each is audited as ("pool", create | update | scale | delete) with the pool's settings and version before and after;
an edit, scale or delete goes ahead only while the pool is at the version ``If-Match`` names (else 412).
"""

from __future__ import annotations

from typing import Any

from fastapi import status

from fleet.desired.pools import PlacementStore
from fleet.pools import Pool, PoolSpec, PoolStore
from isolation.tenants import TenantStore
from predictor.store import SubjectKind
from web.changes.audit import Auditor, existing
from web.errors import ApiError, refusals
from web.schemas.pools import PoolIn, PoolPatch, ScaleIn, pool_out, spec_changes
from web.services import AppServices

# PATCH may set these to null: learn the capacity, no model (a built-in engine), any GPU memory
CLEARABLE = {"replica_capacity", "model", "gpu_memory_mib", "scale_target"}
LIVE_COUNTS = {"current_replicas", "ready_replicas", "starting_replicas", "draining_replicas"}


def _audited(pool: Pool, now: float) -> dict[str, Any]:
    """The pool as the audit log keeps it: its settings and version, without the live replica counts."""
    return pool_out(pool, {}, now).model_dump(mode="json", exclude=LIVE_COUNTS)


def apply_pool_create(audit: Auditor, body: PoolIn, *, now: float) -> Pool:
    """Create a pool, audited as ("pool", "create"); a bad value is refused 422, a name taken 409."""
    with refusals():
        spec = PoolSpec(**spec_changes(body.model_dump(exclude={"name"})))
    with audit.change("pool", "create", body.name) as change:
        pool = PoolStore(change.engine).create(body.name, spec, now=now)
        change.after = _audited(pool, now)
    return pool


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
    with audit.change("pool", "update", name) as change:
        store = PoolStore(change.engine)
        before = existing(store.get(name), f"pool {name!r}", if_match)
        pool = store.update(name, spec_changes(fields), now=now, expected_version=body.version)
        change.before, change.after = _audited(before, now), _audited(pool, now)
    return pool


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
    with audit.change("pool", "scale", name) as change:
        store = PoolStore(change.engine)
        before = existing(store.get(name), f"pool {name!r}", if_match)
        pool = store.scale_manually(name, body.replicas, until=now + duration, reason=reason, now=now)
        change.before, change.after = _audited(before, now), _audited(pool, now)
    return pool


def apply_pool_delete(
    audit: Auditor, name: str, services: AppServices, *, if_match: frozenset[int] | None = None
) -> None:
    """Delete a pool, audited as ("pool", "delete"); then what was kept for it goes with it (its forecasts, its
    placements, its tenants' quotas, its enforcement state), and the nodes still running it are told 0 until none
    does."""
    now = services.clock()
    with audit.change("pool", "delete", name) as change:
        store = PoolStore(change.engine)
        before = existing(store.get(name), f"pool {name!r}", if_match)
        store.delete(name)
        change.before = _audited(before, now)
    services.forecasts.forget(SubjectKind.POOL, name)
    PlacementStore(services.engine).retire(name, now=now)
    TenantStore(services.engine).forget_pool(name)
    services.enforcement.forget_pool(name)
    services.publish_tenants()  # the nodes drop its tenants' quotas and limits at their next push

"""``/api/v1/pools``: list and read pools (viewer), create and delete them (admin), edit them (operator).

A GET answers the pool's ``ETag``; an edit, scale or delete with ``If-Match`` goes ahead only while the pool is still
at that version (else 412 with the current version), so two operators never overwrite each other silently. An
edit may instead carry the ``version`` it read in its body (409 when the pool changed since). Every change is
audited (``web.changes.pools``); the fields and replica counts are described in ``web.schemas.pools``.
"""

from __future__ import annotations

from fastapi import APIRouter, Response, status

from fleet.pools import Pool
from web.auth import AdminToken, OperatorToken, ServicesDep, ViewerToken
from web.changes.audit import AuditorDep, existing
from web.changes.pools import apply_pool_create, apply_pool_delete, apply_pool_patch, apply_pool_scale
from web.errors import ERROR_RESPONSES, error_responses
from web.etags import IfMatch, tag
from web.schemas.pools import PoolIn, PoolOut, PoolPage, PoolPatch, ReplicaCounts, ScaleIn, pool_out, replica_counts
from web.services import AppServices

router = APIRouter(tags=["pools"], responses=ERROR_RESPONSES)


def _replicas(services: AppServices) -> dict[str, ReplicaCounts]:
    return replica_counts(services.fleet.read(services.clock()))


def _answer(pool: Pool, services: AppServices, response: Response) -> PoolOut:
    tag(response, pool.version)
    return pool_out(pool, _replicas(services), services.clock())


@router.get("/pools")
def list_pools(services: ServicesDep, _token: ViewerToken) -> PoolPage:
    replicas = _replicas(services)
    return PoolPage(items=[pool_out(p, replicas, services.clock()) for p in services.pools.list()])


@router.get("/pools/{name}", responses=error_responses(404))
def get_pool(name: str, services: ServicesDep, _token: ViewerToken, response: Response) -> PoolOut:
    return _answer(existing(services.pools.get(name), f"pool {name!r}"), services, response)


@router.post("/pools", status_code=status.HTTP_201_CREATED, responses=error_responses(409))
def create_pool(
    body: PoolIn, services: ServicesDep, _token: AdminToken, audit: AuditorDep, response: Response
) -> PoolOut:
    return _answer(apply_pool_create(audit, body, now=services.clock()), services, response)


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
    apply_pool_delete(audit, name, services, if_match=if_match)
    return Response(status_code=status.HTTP_204_NO_CONTENT)


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

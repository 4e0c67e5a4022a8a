"""The audit log and the one frame every change is made in: one row for every change made through the API or the
dashboard — who (token id, name, role), what (resource, id, action), the resource before and after as the API shows
it (secrets redacted), when, and the request id.

A change is made inside ``Auditor.change(...)``: the store calls run on the connection of one transaction and the
audit row is written in that same transaction at the end, so a change is never without its row, nor a row without
its change. Stores written against an ``Engine`` join that transaction through ``JoinedEngine``. A store's refusal
is answered as the API answers it, and the tenants part is published once the change is committed. Each change is
one function of ``web.changes`` (``web.changes.pools.apply_pool_scale``, ...) that the API route and the dashboard's
form action both call, so the row, the validation and the refusals cannot drift apart.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Annotated, Any, Protocol, TypeVar, cast

from fastapi import Depends, Request
from fastapi.encoders import jsonable_encoder
from sqlalchemy import Connection, Dialect, Engine, insert, or_, select

from web.errors import not_found, refusals
from web.etags import require_match
from web.request_id import request_id
from web.services import AppServices
from web.tables import audit_log
from web.tokens import TokenInfo

REDACTED = "***"
# Keys whose values never reach the log: webhook secrets, clear tokens and tenant keys, their digests.
SECRET_KEYS = frozenset({"secret", "token", "token_hash", "key", "key_hash", "password", "authorization"})
# Publishes the tenants part after a change (AppServices.publish_tenants), so the nodes hear of it at their next push.
Publish = Callable[[], object]


@dataclass(frozen=True)
class AuditEntry:
    ts: float
    request_id: str
    actor_id: str
    actor_name: str
    actor_role: str
    resource: str
    resource_id: str
    action: str
    before: Any
    after: Any
    id: int | None = None


def redacted(value: Any) -> Any:
    """``value`` made JSON-safe with every secret replaced by ``***`` (at any depth)."""
    plain = jsonable_encoder(value)
    if isinstance(plain, Mapping):
        return {k: (REDACTED if k in SECRET_KEYS and v is not None else redacted(v)) for k, v in plain.items()}
    if isinstance(plain, list):
        return [redacted(v) for v in plain]
    return plain


class AuditLog:
    """Rows are written on the caller's connection (its transaction); read newest first."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    @staticmethod
    def record(conn: Connection, entry: AuditEntry) -> None:
        values = {k: v for k, v in vars(entry).items() if k != "id"}
        values.update(before=redacted(entry.before), after=redacted(entry.after))
        conn.execute(insert(audit_log).values(**values))

    def list(
        self,
        *,
        resource: str | None = None,
        actor: str | None = None,
        since: float | None = None,
        before: int | None = None,
        limit: int = 100,
    ) -> list[AuditEntry]:
        """Newest first; ``actor`` is a token id or name; ``before`` an id to page below."""
        query = select(audit_log).order_by(audit_log.c.id.desc()).limit(limit)
        if resource is not None:
            query = query.where(audit_log.c.resource == resource)
        if actor is not None:
            query = query.where(or_(audit_log.c.actor_id == actor, audit_log.c.actor_name == actor))
        if since is not None:
            query = query.where(audit_log.c.ts >= since)
        if before is not None:
            query = query.where(audit_log.c.id < before)
        with self.engine.connect() as conn:
            return [AuditEntry(**r._mapping) for r in conn.execute(query)]


class JoinedEngine:
    """Stands in for an ``Engine`` so that a store's ``with engine.begin()`` / ``engine.connect()`` blocks run on one
    connection inside the caller's transaction: a refusal raised in them rolls back the whole change.

    It holds for stores that only run statements in those blocks (every store of this project); a store that caught
    a database error inside one and carried on would need a savepoint instead.
    """

    def __init__(self, conn: Connection) -> None:
        self._conn = conn
        self.dialect: Dialect = conn.dialect

    @contextmanager
    def begin(self) -> Iterator[Connection]:
        yield self._conn

    @contextmanager
    def connect(self) -> Iterator[Connection]:
        yield self._conn


class Versioned(Protocol):
    @property
    def version(self) -> int: ...


V = TypeVar("V", bound=Versioned)


def existing(found: V | None, what: str, if_match: frozenset[int] | None = None) -> V:
    """The versioned resource a request names (a pool, a tenant, an alert rule): 404 ``no <what>`` when there is
    none, 412 when ``If-Match`` names another version than the one it is at."""
    if found is None:
        raise not_found(f"no {what}")
    require_match(if_match, found.version, what)
    return found


@dataclass
class Change:
    """What one audited change did: the change function fills ``before``/``after`` (and ``resource_id`` once known)."""

    engine: Engine  # the stores' engine for this change: every statement joins the change's transaction
    resource_id: str
    before: Any = None
    after: Any = None


class Auditor:
    """The audit side of one request: who is acting (the token the role check accepted) and the request's id."""

    def __init__(self, engine: Engine, request: Request, clock: Callable[[], float]) -> None:
        self._engine = engine
        self._request = request
        self._clock = clock

    @property
    def caller(self) -> TokenInfo:
        """Who acts: the token the API's role check or the dashboard's session check accepted for this request."""
        return self._caller()

    @contextmanager
    def change(
        self, resource: str, action: str, resource_id: str = "", *, publish: Publish | None = None
    ) -> Iterator[Change]:
        """One transaction for the change and its audit row; an exception rolls back both and writes nothing. A
        store's refusal is answered as the API answers it (``web.errors.refused``); once the change is committed,
        ``publish`` (``AppServices.publish_tenants``) tells the nodes at their next push."""
        caller = self._caller()
        with refusals(), self._engine.begin() as conn:
            change = Change(cast(Engine, JoinedEngine(conn)), resource_id)
            yield change
            entry = AuditEntry(
                ts=self._clock(),
                request_id=request_id(self._request),
                actor_id=caller.id,
                actor_name=caller.name,
                actor_role=caller.role.value,
                resource=resource,
                resource_id=change.resource_id,
                action=action,
                before=change.before,
                after=change.after,
            )
            AuditLog.record(conn, entry)
        if publish is not None:
            publish()

    def _caller(self) -> TokenInfo:
        caller = getattr(self._request.state, "caller", None)
        if not isinstance(caller, TokenInfo):
            raise RuntimeError(
                "an audited route must declare its role dependency (web.auth.require, or the dashboard's signed_in)"
            )
        return caller


def get_auditor(request: Request) -> Auditor:
    services: AppServices = request.app.state.services
    return Auditor(services.engine, request, services.clock)


AuditorDep = Annotated[Auditor, Depends(get_auditor)]

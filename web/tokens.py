"""API tokens: creation, hashed storage, lookup with an in-process cache for the ingest hot path.

A token is ``fp_<id>_<secret>`` with 256 bits of secret, so a plain SHA-256 digest is a safe stored form (no
slow hash needed: there is nothing to brute-force).

Verdicts are cached for ``cache_seconds``, and every store drops its whole cache when the token table changed: each
creation and deletion bumps a counter (``job_state`` row ``api_tokens``) in its own transaction, and a store reads
that counter at most once per ``REVOCATION_CHECK_SECONDS``. So a deleted token stops working on every process of
every server within about a second, while a node pushing every 5 s costs one read of its token per cache period
instead of one per push (a 5 s cache missed nearly every push: 14 % of the server's time at 1,000 nodes,
docs/benchmarks.md, "the collector tier").
"""

from __future__ import annotations

import hashlib
import re
import secrets
import threading
from dataclasses import dataclass
from enum import StrEnum

from sqlalchemy import Connection, Engine, delete, insert, select
from sqlalchemy.exc import SQLAlchemyError

from collector.database import insert_for
from collector.tables import job_state
from web.tables import api_tokens
from web.verdict_cache import VerdictCache

REVOCATION_CHECK_SECONDS = 1.0  # how often a store asks whether the token table changed
MAX_CACHED_KNOWN = 50_000  # token verdicts kept: every agent of a 10,000-node fleet and the API's callers, 5x over
MAX_CACHED_UNKNOWN = 1_000  # refusals kept apart (the failure limiter bounds what one address may try)
CHANGES_NAME = "api_tokens"  # the job_state row counting the token table's changes


class Role(StrEnum):
    ADMIN = "admin"
    OPERATOR = "operator"
    VIEWER = "viewer"
    AGENT = "agent"
    REMOTE_WRITE = "remote_write"


# Human roles form a ladder; the machine roles stand apart: an agent ingests for its own node only, a remote_write
# token (a team's Prometheus, an OpenTelemetry collector) only sends series to /api/v1/write and /api/v1/otlp.
ROLE_RANK = {Role.VIEWER: 1, Role.OPERATOR: 2, Role.ADMIN: 3}
MACHINE_ROLES = frozenset({Role.AGENT, Role.REMOTE_WRITE})
# A remote_write token's node scope: fnmatch globs over node names (NAME_PATTERN's characters and * ? [ ]), at most
# MAX_NODE_SCOPE of them: ``gpu-a-*`` lets a team's Prometheus write its own nodes and no one else's.
NODE_GLOB_PATTERN = r"^[A-Za-z0-9._:*?\[\]-]{1,128}$"
MAX_NODE_SCOPE = 64


@dataclass(frozen=True)
class TokenInfo:
    id: str
    name: str
    role: Role
    node_id: str | None
    created_at: float
    node_scope: tuple[str, ...] | None = None  # remote_write only: the node-name globs it may write; None: any

    def can_act_as(self, needed: Role) -> bool:
        if needed in MACHINE_ROLES or self.role in MACHINE_ROLES:
            return self.role is needed
        return ROLE_RANK[self.role] >= ROLE_RANK[needed]


def digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def _info(row: object) -> TokenInfo:
    m = row._mapping  # type: ignore[attr-defined]
    scope = m["node_scope"]
    return TokenInfo(m["id"], m["name"], Role(m["role"]), m["node_id"], m["created_at"], _scope(scope))


def _scope(globs: list[str] | None) -> tuple[str, ...] | None:
    return None if globs is None else tuple(globs)


class TokenStore:
    def __init__(self, engine: Engine, *, cache_seconds: float = 300.0) -> None:
        self._engine = engine
        self._cache_seconds = cache_seconds
        # known tokens and refusals apart, each least recently used first: a flood of unknown tokens (10,400 in the
        # review's test) costs only other refusals, never the verdicts of the fleet's agents
        self._known: VerdictCache[TokenInfo] = VerdictCache(MAX_CACHED_KNOWN)
        self._unknown: VerdictCache[bool] = VerdictCache(MAX_CACHED_UNKNOWN)
        self._lock = threading.Lock()
        self._changes: float | None = None  # the counter as last read
        self._check_due = float("-inf")  # when to read it next
        self._agent_nodes: tuple[frozenset[str], float] | None = None  # the nodes agent tokens name, until when
        counted = insert_for(engine, job_state)
        self._count_change = counted.on_conflict_do_update(
            index_elements=["name"], set_={"watermark": job_state.c.watermark + 1}
        )

    def create(
        self,
        role: Role,
        *,
        now: float,
        name: str = "",
        node_id: str | None = None,
        secret: str | None = None,
        node_scope: tuple[str, ...] | None = None,
    ) -> tuple[TokenInfo, str]:
        """Store a new token and return it with its clear text (shown once, never stored)."""
        if role is Role.AGENT and not node_id:
            raise ValueError("an agent token needs the node it may ingest for (node_id)")
        if role is not Role.AGENT and node_id:
            raise ValueError("only agent tokens are scoped to a node")
        _check_scope(role, node_scope)
        token_id = secrets.token_hex(6)
        clear = secret or f"fp_{token_id}_{secrets.token_urlsafe(32)}"
        info = TokenInfo(token_id, name or f"{role.value}-{token_id}", role, node_id, now, node_scope)
        with self._engine.begin() as conn:
            conn.execute(
                insert(api_tokens).values(
                    id=info.id,
                    name=info.name,
                    role=info.role.value,
                    node_id=info.node_id,
                    node_scope=None if node_scope is None else list(node_scope),
                    token_hash=digest(clear),
                    created_at=now,
                )
            )
            self._changed(conn)
        self.forget_cached()
        return info, clear

    def is_cached(self, clear: str, *, now: float) -> bool:
        """Whether :meth:`verify` would answer from the cache, without reading the database."""
        key = digest(clear)
        cached = self._known.get(key, now=now) is not None or self._unknown.get(key, now=now) is not None
        return cached and now < self._check_due

    def verify(self, clear: str, *, now: float) -> TokenInfo | None:
        key = digest(clear)
        if now >= self._check_due:
            self._check_changes(now)
        known = self._known.get(key, now=now)
        if known is not None or self._unknown.get(key, now=now) is not None:
            return known
        with self._engine.connect() as conn:
            row = conn.execute(select(api_tokens).where(api_tokens.c.token_hash == key)).first()
        if row is None:
            self._unknown.put(key, True, until=now + self._cache_seconds)
            return None
        info = _info(row)
        self._known.put(key, info, until=now + self._cache_seconds)
        return info

    def get(self, token_id: str) -> TokenInfo | None:
        """The token with this id (not its secret); the dashboard re-reads a session's token on every request."""
        with self._engine.connect() as conn:
            row = conn.execute(select(api_tokens).where(api_tokens.c.id == token_id)).first()
        return _info(row) if row is not None else None

    def list(self) -> list[TokenInfo]:
        with self._engine.connect() as conn:
            rows = conn.execute(select(api_tokens).order_by(api_tokens.c.created_at, api_tokens.c.id)).all()
        return [_info(r) for r in rows]

    def delete(self, token_id: str) -> bool:
        with self._engine.begin() as conn:
            deleted = conn.execute(delete(api_tokens).where(api_tokens.c.id == token_id)).rowcount
            if deleted:
                self._changed(conn)
        self.forget_cached()
        return bool(deleted)

    def agent_nodes(self, *, now: float) -> frozenset[str]:
        """The nodes agent tokens name (remote write never writes them, even before the agent's first push): read
        at most once per cache period, and again as soon as the token table changed."""
        if now >= self._check_due:
            self._check_changes(now)
        with self._lock:
            cached = self._agent_nodes
        if cached is not None and cached[1] > now:
            return cached[0]
        query = select(api_tokens.c.node_id).where(api_tokens.c.role == Role.AGENT.value).distinct()
        with self._engine.connect() as conn:
            found = frozenset(node for node in conn.scalars(query) if node)
        with self._lock:
            self._agent_nodes = (found, now + self._cache_seconds)
        return found

    def forget_cached(self) -> None:
        """Drop every cached lookup: a token deleted through another store object stops working here at once."""
        self._forget_verdicts()
        with self._lock:
            self._agent_nodes = None

    def _forget_verdicts(self) -> None:
        self._known.clear()
        self._unknown.clear()

    def _changed(self, conn: Connection) -> None:
        conn.execute(self._count_change, [{"name": CHANGES_NAME, "watermark": 1.0}])

    def _check_changes(self, now: float) -> None:
        """Drop the cache if the token table changed since the last look. A database that cannot be read leaves the
        cache as it is (the request's own lookup, if it needs one, reports the outage) and is asked again next time."""
        try:
            with self._engine.connect() as conn:
                changes = conn.scalar(select(job_state.c.watermark).where(job_state.c.name == CHANGES_NAME))
        except SQLAlchemyError:
            return
        with self._lock:
            if changes != self._changes:
                self._forget_verdicts()
                self._agent_nodes = None
                self._changes = changes
            self._check_due = now + REVOCATION_CHECK_SECONDS

    def has_admin(self) -> bool:
        with self._engine.connect() as conn:
            row = conn.execute(select(api_tokens.c.id).where(api_tokens.c.role == Role.ADMIN.value).limit(1)).first()
        return row is not None


def _check_scope(role: Role, node_scope: tuple[str, ...] | None) -> None:
    """A node scope is a remote_write token's, of 1 to ``MAX_NODE_SCOPE`` globs of ``NODE_GLOB_PATTERN``."""
    if node_scope is None:
        return
    if role is not Role.REMOTE_WRITE:
        raise ValueError("only remote_write tokens take a node scope")
    if not 1 <= len(node_scope) <= MAX_NODE_SCOPE:
        raise ValueError(f"node_scope: {len(node_scope)} globs; give 1 to {MAX_NODE_SCOPE}")
    bad = [glob for glob in node_scope if not re.fullmatch(NODE_GLOB_PATTERN, glob)]
    if bad:
        raise ValueError(f"node_scope: {bad[0][:80]!r} is not a node-name glob ({NODE_GLOB_PATTERN})")

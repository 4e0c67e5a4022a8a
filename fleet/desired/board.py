"""The desired-state board: what every node should run and enforce, computed when the control loops decide and
looked up by the ingest answer without a database read (but one, at a process's first answer).

The table holds one snapshot per part (``pools`` from the autoscaler's local actuator, :mod:`fleet.desired.pools`;
``tenants`` from the isolation enforcer, :mod:`isolation.desired`), each with a version that only grows. The leader of a
part publishes it (one row write, and this process's memory at once; nothing when it did not change); every server
refreshes its board every second, reading the parts' versions and a body only when its version moved, and once before
its first answer (a restarted server answers what is stored, never "nothing" until its first refresh); the ingest route
asks :meth:`DesiredBoard.for_node`, a dictionary lookup once a node's answer is cached.

**Merging.** A part is what every node is told (``common``) and, per node, what overrides it (``nodes``): a node's
``pools``, when it says any, replace common's whole pool set; its ``pool_limits[p]``, ``tenants[t].quotas[p]`` and
``tenant_keys[d]`` replace common's entry of the same key; a tenant's ``slo_class`` is common's where common names
the tenant, else the node's. The parts are then laid over each other by the same rule (pools come from the pools
part, the rest from the tenants part). A part never published says nothing: no pools part, the agent keeps its own
``--pools``; no tenants part, nothing is limited.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from pydantic import ValidationError
from sqlalchemy import JSON, BigInteger, Column, Connection, Double, Engine, String, Table, insert, select, update
from sqlalchemy.exc import IntegrityError

from collector.tables import metadata
from wire.control import DesiredState, TenantDesired

log = logging.getLogger(__name__)

desired_snapshots = Table(
    "desired_snapshots",
    metadata,
    Column("part", String(32), primary_key=True),
    Column("version", BigInteger, nullable=False),
    Column("generated_at", Double, nullable=False),
    Column("body", JSON, nullable=False),
)

NULL_JSON = b"null"


class Part(StrEnum):
    POOLS = "pools"  # the autoscaler's controller (local actuator): each node's pools and replicas
    TENANTS = "tenants"  # the isolation enforcer: tenants, quotas, pool limits, tenant keys


@dataclass(frozen=True)
class DesiredPart:
    """One part of the board: what every node is told, and per node what overrides it (module docstring)."""

    common: DesiredState = field(default_factory=DesiredState)
    nodes: Mapping[str, DesiredState] = field(default_factory=dict)

    def for_node(self, node_id: str) -> DesiredState:
        own = self.nodes.get(node_id)
        return self.common if own is None else overlay(self.common, own)

    def to_body(self) -> dict[str, Any]:
        return {
            "common": _dump(self.common),
            "nodes": {node: _dump(state) for node, state in self.nodes.items()},
        }

    @classmethod
    def from_body(cls, body: Mapping[str, Any]) -> DesiredPart:
        """The part a snapshot row holds; raises ValidationError naming a bad field (a row from a newer server
        keeps what this one knows)."""
        nodes = body.get("nodes") or {}
        return cls(
            DesiredState.model_validate(body.get("common") or {}),
            {str(node): DesiredState.model_validate(state) for node, state in nodes.items()},
        )


def _dump(state: DesiredState) -> dict[str, Any]:
    return state.model_dump(mode="json", exclude_none=True)


def wire_json(state: DesiredState) -> bytes:
    """The ingest answer's form: unset fields and empty limits, tenants and keys left out (the agent's defaults);
    ``pools`` kept even when empty (run nothing)."""
    body = {k: v for k, v in _dump(state).items() if k == "pools" or v}
    return json.dumps(body, separators=(",", ":")).encode()


def overlay(base: DesiredState, over: DesiredState) -> DesiredState:
    """``over`` laid on ``base`` field by field (module docstring, "Merging")."""
    tenants = dict(base.tenants)
    for name, theirs in over.tenants.items():
        ours = base.tenants.get(name)
        tenants[name] = (
            theirs
            if ours is None
            else TenantDesired.model_construct(slo_class=ours.slo_class, quotas={**ours.quotas, **theirs.quotas})
        )
    return DesiredState.model_construct(
        pools=over.pools if over.pools is not None else base.pools,
        pool_limits={**base.pool_limits, **over.pool_limits},
        tenants=tenants,
        tenant_keys={**base.tenant_keys, **over.tenant_keys},
    )


def _bump(conn: Connection, part: Part, stored: dict[str, Any], now: float) -> int | None:
    """Write the part's next version; its number, or None while the part has no row yet."""
    t = desired_snapshots.c
    version = conn.execute(
        update(desired_snapshots)
        .where(t.part == part.value)
        .values(version=t.version + 1, generated_at=now, body=stored)
        .returning(t.version)
    ).scalar()
    return None if version is None else int(version)


@dataclass(frozen=True)
class _Snapshot:
    version: int
    generated_at: float
    part: DesiredPart


class DesiredBoard:
    """Every part's latest snapshot in memory, and each node's merged answer cached until a part changes.

    Thread-safe: ingest asks from its worker threads while the scheduler refreshes and the control loops publish.
    A node's answer is merged once per change of a part (its first request after), then a dictionary lookup.
    """

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self._snapshots: dict[Part, _Snapshot] = {}
        self._lock = threading.Lock()
        self._generation = 0  # moves with every change of a part; a merge begun before one is not cached
        self._answers: dict[str, tuple[DesiredState | None, bytes]] = {}
        # Whether a refresh has read the table yet. Until then this board knows only what it published itself, and
        # an answer from it said ``desired: null`` ("nothing applies") for a restarted server's first second: every
        # agent dropped its tenant keys (401 for every keyed tenant) and lifted its pool limits.
        self._loaded = False
        self._loading = threading.Lock()  # the first answers of a restart arrive together: one of them reads

    def publish(self, part: Part, body: DesiredPart, *, now: float) -> int:
        """Store ``body`` as the part's next version (one UPDATE, or the first INSERT) and install it here at once;
        the other servers see it at their next :meth:`refresh`. Returns the version written."""
        stored = body.to_body()
        with self.engine.begin() as conn:
            version = _bump(conn, part, stored, now)
        if version is None:
            try:
                with self.engine.begin() as conn:
                    conn.execute(
                        insert(desired_snapshots).values(part=part.value, version=1, generated_at=now, body=stored)
                    )
                version = 1
            except IntegrityError:  # another server inserted it first (a leader change in that instant): follow it
                with self.engine.begin() as conn:
                    version = _bump(conn, part, stored, now)
        if version is None:
            raise RuntimeError(f"desired board: part {part} is neither insertable nor updatable")
        self._install({part: _Snapshot(version, now, body)})
        return version

    def publish_changed(self, part: Part, body: DesiredPart, *, now: float) -> int:
        """:meth:`publish` unless ``body`` is what this board holds for the part already: then no write, and no
        server reloads or re-merges anything (a loop publishes every tick; its part seldom moves). The version."""
        snapshot = self._snapshots.get(part)
        if snapshot is not None and snapshot.part == body:
            return snapshot.version
        return self.publish(part, body, now=now)

    def refresh(self) -> None:
        """Reload every part whose stored version is past this board's: one small query for the versions, and the
        bodies of those that moved only. A body this server cannot read is logged and skipped (the old one stays)."""
        t = desired_snapshots.c
        with self.engine.connect() as conn:
            versions = {row.part: row.version for row in conn.execute(select(t.part, t.version))}
            moved = [
                p
                for p in Part
                if p.value in versions and versions[p.value] > self._version(p)  # only ever forward
            ]
            rows = (
                conn.execute(select(t.part, t.version, t.generated_at, t.body).where(t.part.in_(moved))).all()
                if moved
                else []
            )
        found = {}
        for row in rows:
            try:
                found[Part(row.part)] = _Snapshot(row.version, row.generated_at, DesiredPart.from_body(row.body))
            except (ValidationError, ValueError, TypeError, AttributeError) as error:
                log.warning("desired board: cannot read part %s version %s: %s", row.part, row.version, error)
        if found:
            self._install(found)
        self._loaded = True

    def version(self, part: Part) -> int | None:
        """The part's version on this board; None while it was never published (or not yet refreshed)."""
        snapshot = self._snapshots.get(part)
        return None if snapshot is None else snapshot.version

    def part(self, part: Part) -> DesiredPart | None:
        snapshot = self._snapshots.get(part)
        return None if snapshot is None else snapshot.part

    def for_node(self, node_id: str) -> DesiredState | None:
        """The node's merged desired state; None while no part says anything for it."""
        return self._answer(node_id)[0]

    def for_node_json(self, node_id: str) -> bytes:
        """:meth:`for_node` as the ingest answer's JSON (``exclude_none``), serialised once per change of a part."""
        return self._answer(node_id)[1]

    def _answer(self, node_id: str) -> tuple[DesiredState | None, bytes]:
        if not self._loaded:  # this process's first answer: the parts stored before it started come first
            with self._loading:
                if not self._loaded:
                    self.refresh()
        cached = self._answers.get(node_id)
        if cached is not None:
            return cached
        with self._lock:
            generation, snapshots = self._generation, self._snapshots
        merged = self._merge(node_id, snapshots)
        answer = (merged, NULL_JSON if merged is None else wire_json(merged))
        with self._lock:
            if generation == self._generation:  # no part changed while merging: the answer is current
                self._answers[node_id] = answer
        return answer

    @staticmethod
    def _merge(node_id: str, snapshots: Mapping[Part, _Snapshot]) -> DesiredState | None:
        merged: DesiredState | None = None
        for part in Part:
            snapshot = snapshots.get(part)
            if snapshot is None:
                continue
            mine = snapshot.part.for_node(node_id)
            merged = mine if merged is None else overlay(merged, mine)
        return None if merged is None or merged.is_empty() else merged

    def _version(self, part: Part) -> int:
        snapshot = self._snapshots.get(part)
        return 0 if snapshot is None else snapshot.version

    def _install(self, found: Mapping[Part, _Snapshot]) -> None:
        with self._lock:
            newer = {p: s for p, s in found.items() if s.version > self._version(p)}  # never back (refresh)
            if not newer:
                return
            self._generation += 1
            self._snapshots = {**self._snapshots, **newer}
            self._answers = {}

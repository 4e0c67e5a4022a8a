"""The metric families a Prometheus or OpenTelemetry sender sends that no mapping source reads, so nothing vanishes
unsaid: an unmapped series used to get a 204 (OTLP: an empty ``partial_success``) and only a counter in ``/metrics``.

Each family is kept by the protocol it came by (``remote_write``, ``otlp``) with its samples and when it was first
and last seen; ``GET /api/v1/unmapped-families`` and the Health page list them. The names are a sender's, so they
are bounded: a name at most ``MAX_NAME_LENGTH`` characters, at most ``max_families`` names per protocol (past it a new
name is not kept; the list says it is full), and a name not sent for the receiver's idle time is forgotten by the
staging job. A process counts in memory and writes at most every ``flush_seconds`` (the first request at once):
Prometheus sends its own ``up`` and ``scrape_*`` series in nearly every request, and an upsert of them in each
would hold the same rows' locks across every server's writes.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass

from sqlalchemy import Connection, Engine, bindparam, func, insert, select, update

from collector.database import storage_errors
from collector.ingest import later_of
from collector.remote.series import SourceKind
from collector.remote.tables import remote_unmapped

MAX_FAMILIES = 1000  # per protocol
MAX_NAME_LENGTH = 200
FLUSH_SECONDS = 10.0
# a histogram's or summary's series: one family with its _bucket, _count and _sum (a counter keeps its _total, the
# name people query)
FOLDED_SUFFIXES = ("_bucket", "_count", "_sum")


def family_name(series_name: str) -> str:
    """The family a series of an unknown type belongs to, as listed: ``go_gc_duration_seconds_bucket`` →
    ``go_gc_duration_seconds``; ``up`` → ``up``; a name past ``MAX_NAME_LENGTH`` cut there, ending in ``…``."""
    name = next((series_name[: -len(s)] for s in FOLDED_SUFFIXES if series_name.endswith(s)), series_name) or "?"
    return name if len(name) <= MAX_NAME_LENGTH else name[: MAX_NAME_LENGTH - 1] + "…"


def by_family(samples_by_series: Mapping[str, int]) -> Counter[str]:
    """Samples per series name → samples per family."""
    found: Counter[str] = Counter()
    for name, samples in samples_by_series.items():
        found[family_name(name)] += samples
    return found


def data_points(samples_by_series: Mapping[str, int]) -> Counter[str]:
    """OTLP data points per family, from the samples of its series: a histogram or summary point made one ``_count``
    sample (and a ``_sum`` and a sample per bucket or quantile), any other point one sample. Worked: a histogram of
    two points with bounds (0.1, 1) made 2 ``_count``, 2 ``_sum`` and 6 ``_bucket`` samples: 2 data points."""
    counts = {name[: -len("_count")]: n for name, n in samples_by_series.items() if name.endswith("_count")}
    found: Counter[str] = Counter()
    for name, samples in samples_by_series.items():
        family = family_name(name)
        if family not in counts or family == name:
            found[family] += samples
        elif name.endswith("_count"):
            found[family] += counts[family]
    return found


@dataclass(frozen=True)
class UnmappedFamily:
    source: SourceKind
    name: str
    samples: int
    first_seen: float
    last_seen: float


@dataclass
class _Pending:
    samples: int
    first_seen: float
    last_seen: float


class UnmappedFamilies:
    """``note`` what each request carried in vain; ``families`` lists what is kept."""

    def __init__(
        self, engine: Engine, *, max_families: int = MAX_FAMILIES, flush_seconds: float = FLUSH_SECONDS
    ) -> None:
        self._engine = engine
        self.max_families = max_families
        self._flush_seconds = flush_seconds
        self._lock = threading.Lock()
        self._pending: dict[tuple[SourceKind, str], _Pending] = {}
        self._flushed_at = float("-inf")

    def note(self, source: SourceKind, samples_by_series: Mapping[str, int], now: float) -> None:
        """Count one request's unmapped samples (by series name); written now if the last write is
        ``flush_seconds`` old. At most ``max_families`` names of a protocol wait here."""
        families = by_family(samples_by_series)
        with self._lock:
            waiting = sum(1 for s, _ in self._pending if s == source)
            for name, samples in families.items():
                found = self._pending.get((source, name))
                if found is not None:
                    found.samples += samples
                    found.last_seen = now
                elif waiting < self.max_families:
                    self._pending[(source, name)] = _Pending(samples, now, now)
                    waiting += 1
            due = now - self._flushed_at >= self._flush_seconds
        if due:
            self.flush(now)

    def flush(self, now: float) -> None:
        """Write what waits: known names counted on, new ones added while their protocol has room."""
        with self._lock:
            pending, self._pending = self._pending, {}
            self._flushed_at = now
        if not pending:
            return
        with storage_errors(), self._engine.begin() as conn:
            for source in sorted({s for s, _ in pending}):
                self._write(conn, source, {name: p for (s, name), p in pending.items() if s == source})

    def _write(self, conn: Connection, source: SourceKind, pending: dict[str, _Pending]) -> None:
        t = remote_unmapped.c
        names = sorted(pending)
        known = set(conn.scalars(select(t.name).where(t.source == source, t.name.in_(names))))
        if known:
            conn.execute(
                update(remote_unmapped)
                .where(t.source == source, t.name == bindparam("known_name"))
                .values(samples=t.samples + bindparam("added"), last_seen=later_of(t.last_seen, bindparam("seen"))),
                [{"known_name": n, "added": pending[n].samples, "seen": pending[n].last_seen} for n in sorted(known)],
            )
        room = self.max_families - int(conn.scalar(select(func.count()).where(t.source == source)) or 0)
        new = [n for n in names if n not in known][: max(room, 0)]
        if new:
            conn.execute(
                insert(remote_unmapped),
                [{"source": source, "name": n, **vars(pending[n])} for n in new],
            )

    def families(
        self, *, source: SourceKind | None = None, after: tuple[str, str] | None = None, limit: int = 100
    ) -> list[UnmappedFamily]:
        """The kept families by protocol and name, from after ``after`` (a (protocol, name) a page ended with)."""
        t = remote_unmapped.c
        query = select(remote_unmapped).order_by(t.source, t.name).limit(limit)
        if source is not None:
            query = query.where(t.source == source)
        if after is not None:
            query = query.where((t.source > after[0]) | ((t.source == after[0]) & (t.name > after[1])))
        with self._engine.connect() as conn:
            return [UnmappedFamily(**row._mapping) for row in conn.execute(query)]

    def full(self) -> list[SourceKind]:
        """The protocols holding ``max_families`` names: a new name of theirs is not kept."""
        t = remote_unmapped.c
        query = select(t.source).group_by(t.source).having(func.count() >= self.max_families).order_by(t.source)
        with self._engine.connect() as conn:
            return list(conn.scalars(query))

"""The remote-write and OTLP receiver's storage: staged points in, derived samples out, in one transaction.

Per request (``RemoteWriter.write``): the series are mapped and their points staged (``collector.remote.staging``); new
series are registered, up to each source's ``max_series``; every point is inserted under its ``(series_id, ts)`` key
(``collector.remote.point_insert``): a resend or a WAL replay hits it (an equal value is a duplicate, another a
conflict); then each group that gained a point has its sample at that time derived again (``collector.remote.derive``)
from all its staged points (held in memory where the store counts as many: ``collector.remote.recent_scrapes``) and
written as an agent's samples are (``collector.remote.derived_samples``), under a negative ``seq`` of its own (a hash of
group and time), so a node an agent also reports keeps both. A scrape split over several requests thus converges to what
the whole scrape gives, whichever request comes last.

One writer per process; on PostgreSQL a transaction-scoped advisory lock per group keeps two servers from deriving
one group from each other's half of a scrape.
"""

from __future__ import annotations

import threading
import time
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from sqlalchemy import Connection, Engine, func, select, text

from collector.database import insert_for, storage_errors
from collector.remote.derive import SeriesInfo, derive_at, families, interval_at, memory_total_at
from collector.remote.derived_samples import DerivedSamples, sample_row
from collector.remote.mapping import SeriesMapping, family_of
from collector.remote.node_admission import KnownNode, Sender, admit
from collector.remote.point_insert import PointInserter, chunks
from collector.remote.recent_scrapes import RecentScrapes
from collector.remote.series import RemoteSeries, SourceKind
from collector.remote.staging import Dropped, Placements, Staged, StagedSeries, stage
from collector.remote.tables import remote_points, remote_series
from collector.remote.unmapped import UnmappedFamilies
from collector.remote.wire_counts import WireBounds
from collector.tables import NO_DEVICE, NO_POOL, nodes

COUNTS_REREAD_SECONDS = 60.0
SERIES_RECHECK_SECONDS = 60.0  # how long a series known stored is taken as stored without a look
MAX_KNOWN = 200_000
MODEL_MAX_LENGTH = 256  # MODEL_PATTERN's, and the pools.model column's


@dataclass(frozen=True)
class ReceiverLimits:
    """``window_seconds``: how far back a point may come (out of order, or replayed) and how long points are staged;
    ``max_gap_seconds``: the longest gap between two scrapes a rate or p99 spans (as the agent's 30 s, but scrapes
    come every 15–60 s)."""

    max_series_per_request: int = 50_000
    max_future_seconds: float = 300.0
    window_seconds: float = 600.0
    max_gap_seconds: float = 150.0
    max_samples_per_request: int = 500_000
    max_labels_per_request: int = 500_000
    max_label_bytes: int = 2048
    max_nodes_per_token: int = 1000
    idle_series_seconds: float = 3600.0  # a token's node not seen this long no longer counts toward its bound

    @property
    def wire(self) -> WireBounds:
        """What a body may hold, counted before it is decoded."""
        return WireBounds(self.max_series_per_request, self.max_samples_per_request, self.max_labels_per_request)


@dataclass
class WriteOutcome:
    stored: int = 0  # new points
    duplicates: int = 0  # points already stored with the same value
    samples: int = 0  # fleetpilot samples derived (written or rewritten)
    dropped: Counter[str] = field(default_factory=Counter)
    details: dict[str, str] = field(default_factory=dict)  # the first of each refusal, said so a sender can fix it
    unmapped: Counter[str] = field(default_factory=Counter)  # the unmapped points by series name


class RemoteWriter:
    def __init__(
        self,
        engine: Engine,
        mapping: SeriesMapping,
        *,
        limits: ReceiverLimits | None = None,
        unmapped: UnmappedFamilies | None = None,
    ) -> None:
        self._engine = engine
        self._mapping = mapping
        self._limits = limits or ReceiverLimits()
        self.unmapped = unmapped or UnmappedFamilies(engine)
        self._placements = Placements(mapping, max_label_bytes=self._limits.max_label_bytes)
        self._lock = threading.Lock()
        self._dialect = engine.dialect.name
        self._out = DerivedSamples(self._dialect, mapping)
        self._inserter = PointInserter(self._dialect)
        # a scrape's rate reads the one before (within max_gap_seconds), its p99 the window's oldest (before it)
        self._recent = RecentScrapes(keep_seconds=self._limits.max_gap_seconds)
        self._info: dict[int, SeriesInfo] = {}  # the series this process has met (forgotten past MAX_KNOWN)
        self._confirmed: dict[int, float] = {}  # series id → when this process last knew it stored
        self._per_source: dict[str, int] = {}  # series per source, as last read (then counted here)
        self._counted_at = float("-inf")  # when they were read (time.monotonic())

    @property
    def limits(self) -> ReceiverLimits:
        return self._limits

    def write(
        self, series: Sequence[RemoteSeries], *, received_at: float, kind: SourceKind, sender: Sender
    ) -> WriteOutcome:
        """Store one request's ``series`` (sent by ``kind`` with ``sender``'s token), committed before this
        returns; the nodes it may not write (``collector.remote.node_admission``) dropped, by reason, and the
        families no source reads noted (``collector.remote.unmapped``).

        OTLP names are matched case-insensitively (``SeriesMapping.spelt_as_mapped``): the OpenTelemetry API calls
        instrument names case-insensitive and its Python SDK lowercases them. Prometheus names are case-sensitive.
        """
        limits = self._limits
        staged = stage(
            self._mapping.spelt_as_mapped(series) if kind == "otlp" else series,
            self._placements,
            now=received_at,
            oldest=received_at - limits.window_seconds,
            max_future_seconds=limits.max_future_seconds,
        )
        outcome = WriteOutcome(dropped=staged.dropped, details=staged.details, unmapped=staged.unmapped)
        if staged.series:
            with storage_errors(), self._lock:
                try:
                    with self._engine.begin() as conn:
                        kept = self._admit(conn, staged, sender, received_at)
                        if kept:
                            self._write(
                                conn, kept, outcome, received_at=received_at, kind=kind, token_id=sender.token_id
                            )
                except BaseException:
                    self._recent.clear()  # it may hold points the rollback took back
                    self._out.forget()
                    raise
        if staged.unmapped:
            self.unmapped.note(kind, staged.unmapped, received_at)
        return outcome

    def _admit(self, conn: Connection, staged: Staged, sender: Sender, received_at: float) -> list[StagedSeries]:
        """The staged series whose nodes ``sender`` may write: the nodes named read, the token's still seen
        counted (``idle_series_seconds``), then decided."""
        n = nodes.c
        names = sorted({s.place.node_id for s in staged.series})
        known: dict[str, KnownNode] = {}
        for chunk in range(0, len(names), 2000):
            query = select(n.id, n.source, n.remote_token_id).where(n.id.in_(names[chunk : chunk + 2000]))
            known.update({node: KnownNode(source, token) for node, source, token in conn.execute(query)})
        token_nodes = 0  # counted only when a node is new: most requests name known nodes only
        if len(known) < len(names):
            seen_after = received_at - self._limits.idle_series_seconds
            counted = select(func.count()).where(n.remote_token_id == sender.token_id, n.last_seen >= seen_after)
            token_nodes = int(conn.scalar(counted) or 0)
        return admit(
            staged.series,
            sender,
            known,
            token_nodes=token_nodes,
            max_nodes=self._limits.max_nodes_per_token,
            into=staged,
        )

    def _write(
        self,
        conn: Connection,
        staged: list[StagedSeries],
        outcome: WriteOutcome,
        *,
        received_at: float,
        kind: SourceKind,
        token_id: str,
    ) -> None:
        if self._dialect == "postgresql":
            for group in sorted({s.group_id for s in staged}):
                conn.execute(text("SELECT pg_advisory_xact_lock(:g)"), {"g": group})
        kept = self._register(conn, staged, outcome, received_at)
        touched = self._insert_points(conn, kept, outcome)
        if touched:
            rows, memory = self._derive(conn, touched, kept, outcome, kind=kind)
            self._out.store(conn, rows, kept, memory, received_at=received_at, kind=kind, token_id=token_id)
            outcome.samples = sum(has_metrics for _, has_metrics in rows)

    def _register(
        self, conn: Connection, staged: list[StagedSeries], outcome: WriteOutcome, received_at: float
    ) -> list[StagedSeries]:
        """Known series, and new ones while their source has room; the rest dropped (``series_limit``).

        A series this process registered or saw stored within ``SERIES_RECHECK_SECONDS`` is taken as stored; the
        others are looked up, the new ones inserted and the stored ones' ``last_seen`` moved on (what the staging
        job's forgetting of idle series reads): once a minute per series, not once a request.
        """
        fresh_after = received_at - SERIES_RECHECK_SECONDS
        unsure = [s.series_id for s in staged if self._confirmed.get(s.series_id, float("-inf")) <= fresh_after]
        stored: set[int] = set()
        for ids in chunks(unsure):
            stored.update(conn.scalars(select(remote_series.c.id).where(remote_series.c.id.in_(ids))))
        counts = self._source_counts(conn)
        unsure_set = set(unsure)
        kept, new_rows = [], []
        for s in staged:
            if s.series_id in unsure_set and s.series_id not in stored:
                source = self._mapping.by_name[s.place.source]
                if counts.get(source.name, 0) >= source.spec.max_series:
                    outcome.dropped[Dropped.SERIES_LIMIT] += len(s.points)
                    continue
                counts[source.name] = counts.get(source.name, 0) + 1
                stored.add(s.series_id)
                new_rows.append(_series_row(s, received_at))
            if s.series_id not in self._info:
                self._info[s.series_id] = SeriesInfo(s.family, s.name, s.labels)
            kept.append(s)
        if new_rows:
            conn.execute(insert_for(self._dialect, remote_series).on_conflict_do_nothing(), new_rows)
        for ids in chunks(sorted(stored)):
            conn.execute(remote_series.update().where(remote_series.c.id.in_(ids)).values(last_seen=received_at))
        if len(self._confirmed) > MAX_KNOWN:  # series come and go with pods: forget, re-read what is needed
            self._confirmed.clear()
            self._info = {s.series_id: SeriesInfo(s.family, s.name, s.labels) for s in kept}
            self._recent.clear()  # their families were built from the names now forgotten
        self._confirmed.update(dict.fromkeys(stored, received_at))
        return kept

    def _source_counts(self, conn: Connection) -> dict[str, int]:
        """Series per source, read at most once a minute: other servers register series too, and the staging job
        forgets idle ones; in between, this process counts its own."""
        if time.monotonic() - self._counted_at > COUNTS_REREAD_SECONDS:
            rows = conn.execute(select(remote_series.c.source, func.count()).group_by(remote_series.c.source))
            self._per_source = {source: n for source, n in rows}
            self._counted_at = time.monotonic()
        return self._per_source

    def _insert_points(
        self, conn: Connection, staged: list[StagedSeries], outcome: WriteOutcome
    ) -> dict[int, set[float]]:
        """Insert every point; answer the new ones' times by group. Counts duplicates and conflicts."""
        rows = {(s.series_id, ts): (s.group_id, value) for s in staged for ts, value in s.points}
        if not rows:
            return {}
        new, held = self._inserter.insert(conn, rows)
        outcome.stored += len(new)
        for key, value in held.items():
            if value == rows[key][1]:
                outcome.duplicates += 1
            else:
                outcome.dropped[Dropped.CONFLICT] += 1
        touched: dict[tuple[int, float], list[tuple[int, float]]] = defaultdict(list)
        for sid, ts in new:
            touched[(rows[(sid, ts)][0], ts)].append((sid, rows[(sid, ts)][1]))
        by_group: dict[int, set[float]] = defaultdict(set)
        for (group, ts), points in touched.items():
            self._recent.add(group, ts, points)
            by_group[group].add(ts)
        return by_group

    def _derive(
        self,
        conn: Connection,
        touched: dict[int, set[float]],
        staged: list[StagedSeries],
        outcome: WriteOutcome,
        *,
        kind: SourceKind,
    ) -> tuple[list[tuple[dict[str, Any], bool]], dict[tuple[str, int], int]]:
        """Derive again each touched group's samples at its new times (and at the later times that read them): the
        rows to store, each with whether it holds a metric (a metric past agent ingest's bounds is left out and
        counted, ``out_of_range``), and each GPU's memory size at its latest of those times (``memory_total``).

        Two reads: the group's scrape times around the new ones (the index alone), then the points of just the
        scrapes a derivation reads — its own, the one before and the window's oldest — not every staged one.
        """
        gap = self._limits.max_gap_seconds
        counts = self._scrape_counts(conn, touched, gap)
        times = {group: sorted(found) for group, found in counts.items()}
        wanted: dict[int, list[float]] = {g: _to_derive(times[g], new, gap) for g, new in touched.items()}
        read: dict[int, set[float]] = defaultdict(set)
        for group, targets in wanted.items():
            for ts in targets:
                previous, window = interval_at(ts, times[group], max_gap_seconds=gap)
                read[group] |= {t for t in (ts, previous, window) if t is not None}
        self._read_missing(conn, {g: self._recent.missing(g, counts[g], read[g]) for g in read})
        place_of = {s.group_id: s.place for s in staged}
        rows = []
        memory: dict[tuple[str, int], int] = {}
        build = partial(families, info=self._info)  # a scrape's families, built once (RecentScrapes)
        for group, targets in wanted.items():
            place = place_of[group]
            source = self._mapping.by_name[place.source]
            table = source.table
            scrapes = {ts: self._recent.families(group, ts, build) for ts in sorted(read[group])}
            if place.device is not None and source.memory_total is not None:
                total = memory_total_at(source.memory_total, targets[-1], scrapes[targets[-1]])
                if total is not None:
                    memory[(place.node_id, place.device)] = total
            for ts in targets:
                derived, resolution = derive_at(table, ts, scrapes, times[group], max_gap_seconds=gap)
                metrics = derived.metrics  # within agent ingest's bounds; those outside are in rejected
                for problem in derived.rejected:
                    outcome.dropped[Dropped.OUT_OF_RANGE] += 1
                    outcome.details.setdefault(Dropped.OUT_OF_RANGE, f"node {place.node_id!r}: {problem}")
                extra: dict[str, Any] = {"source": kind, **derived.extra}
                if resolution is not None:
                    extra["resolution_seconds"] = round(resolution, 3)
                if place.model is not None and place.device is None:
                    extra["model"] = place.model[:MODEL_MAX_LENGTH]  # the pool's model, shown beside its name
                rows.append((sample_row(place, group, ts, metrics, extra), bool(metrics)))
        self._recent.trim(touched)
        return rows, memory

    def _scrape_counts(
        self, conn: Connection, touched: dict[int, set[float]], gap: float
    ) -> dict[int, dict[float, int]]:
        """Each touched group's staged scrape times, with their points counted, within ``gap`` before its first new
        one to ``gap`` after its last (the later ones a late point changes)."""
        p = remote_points.c
        lo = min(min(ts) for ts in touched.values()) - gap
        hi = max(max(ts) for ts in touched.values()) + gap
        counts: dict[int, dict[float, int]] = defaultdict(dict)
        for groups in chunks(list(touched)):
            query = (
                select(p.group_id, p.ts, func.count())
                .where(p.group_id.in_(groups), p.ts.between(lo, hi))
                .group_by(p.group_id, p.ts)
            )
            for group, ts, n in conn.execute(query):
                counts[group][ts] = n
        return counts

    def _read_missing(self, conn: Connection, missing: dict[int, list[float]]) -> None:
        """Read back the (group, time) scrapes this process does not hold as stored (``RecentScrapes``), and learn
        the series they belong to."""
        p = remote_points.c
        wanted = {group: set(found) for group, found in missing.items() if found}
        read: dict[tuple[int, float], list[tuple[int, float]]] = defaultdict(list)
        for groups in chunks(list(wanted)):
            every_ts = sorted({ts for group in groups for ts in wanted[group]})
            query = select(p.group_id, p.series_id, p.ts, p.value).where(p.group_id.in_(groups), p.ts.in_(every_ts))
            for group, sid, ts, value in conn.execute(query):
                if ts in wanted[group]:
                    read[(group, ts)].append((sid, value))
        self._learn_series(conn, {sid for points in read.values() for sid, _ in points})
        for (group, ts), points in read.items():
            self._recent.put(group, ts, points)

    def _learn_series(self, conn: Connection, ids: set[int]) -> None:
        """Series another process registered: their names and labels, read once."""
        unknown = [sid for sid in ids if sid not in self._info]
        for chunk in range(0, len(unknown), 5000):
            c = remote_series.c
            for sid, source, name, labels in conn.execute(
                select(c.id, c.source, c.name, c.labels).where(c.id.in_(unknown[chunk : chunk + 5000]))
            ):
                known = self._mapping.by_name.get(source)
                family = None if known is None else family_of(name, known.families)
                if family is not None:
                    self._info[sid] = SeriesInfo(family, name, labels)


def _to_derive(times: list[float], new_times: set[float], gap: float) -> list[float]:
    """The new times, and the later ones within ``gap`` of one: their rate or p99 read the new point."""
    return [t for t in times if t in new_times or any(0 < t - n <= gap for n in new_times)]


def _series_row(s: StagedSeries, received_at: float) -> dict[str, Any]:
    return {
        "id": s.series_id,
        "group_id": s.group_id,
        "source": s.place.source,
        "node_id": s.place.node_id,
        "device": NO_DEVICE if s.place.device is None else s.place.device,
        "pool": NO_POOL if s.place.pool is None else s.place.pool,
        "name": s.name[:255],
        "labels": dict(s.labels),
        "first_seen": received_at,
        "last_seen": received_at,
    }

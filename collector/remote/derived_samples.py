"""The samples derived from remote-write and OTLP points, written as ingest writes an agent's: ``samples``, the
latest value of each series, the node (its source and resolution), its GPUs from the exporter's labels, and the
rollup backlog for minutes the rollup job has passed."""

from __future__ import annotations

import json
import time
from statistics import median
from typing import Any

from sqlalchemy import Connection, func

from collector.database import insert_for
from collector.ingest import backlog_upsert, later_of, latest_upsert
from collector.remote.mapping import SeriesMapping, SeriesPlace
from collector.remote.series import SourceKind
from collector.remote.staging import StagedSeries, stable_id
from collector.remote.written_recently import WrittenRecently
from collector.rollups import bucket_start
from collector.sample_insert import SAMPLE_COLUMNS
from collector.tables import AGENT_SOURCE, NO_DEVICE, NO_POOL, devices, nodes
from wire.catalog import METRIC_NAMES

_SEQ_BITS = (1 << 62) - 1
DEVICE_REFRESH_SECONDS = 60.0  # a GPU described as before is written again after this long, not every scrape
# A node's first scrape tells no interval: until its second does, it is taken to be scraped at Prometheus' default
# (global.scrape_interval 1m), so it stays up for SCRAPES_BEFORE_DOWN of those and its pools count from the first
# scrape on (a 15 s scrape measures itself 15 s later).
UNMEASURED_SCRAPE_SECONDS = 60.0


class DerivedSamples:
    def __init__(self, dialect: str, mapping: SeriesMapping) -> None:
        self._dialect = dialect
        self._mapping = mapping
        mark = "?" if dialect == "sqlite" else "%s"
        self._delete_sql = f"DELETE FROM samples WHERE node_id = {mark} AND seq = {mark} AND ts = {mark}"
        columns = ", ".join(f'"{c}"' for c in SAMPLE_COLUMNS)
        self._insert_sql = f"INSERT INTO samples ({columns}) VALUES ({', '.join([mark] * len(SAMPLE_COLUMNS))})"
        self._described = WrittenRecently(("node_id", "index"), refresh_seconds=DEVICE_REFRESH_SECONDS)

    def store(
        self,
        conn: Connection,
        rows: list[tuple[dict[str, Any], bool]],
        staged: list[StagedSeries],
        memory: dict[tuple[str, int], int],
        *,
        received_at: float,
        kind: SourceKind,
        token_id: str,
    ) -> None:
        """Write ``rows`` (each with whether it holds a metric; one without only removes its earlier derivation) and
        the GPUs' ``memory`` sizes (by node and index); a new node is registered as ``token_id``'s."""
        self._samples(conn, rows)
        written = [row for row, has_metrics in rows if has_metrics]
        if written:
            self._latest(conn, written)
            self._nodes(conn, written, received_at=received_at, kind=kind, token_id=token_id)
            self._devices(conn, staged, memory, received_at)
            self._backlog(conn, written)

    def _samples(self, conn: Connection, rows: list[tuple[dict[str, Any], bool]]) -> None:
        """Each row replaces its earlier derivation; a row with no metric (a first scrape of counters) only removes.
        Both through the driver, with tuples: an executemany of SQLAlchemy's per-row dicts cost more than the rows."""
        conn.exec_driver_sql(self._delete_sql, [(row["node_id"], row["seq"], row["ts"]) for row, _ in rows])
        written = [
            (*(row[c] for c in SAMPLE_COLUMNS[:-1]), json.dumps(row["extra"]))
            for row, has_metrics in rows
            if has_metrics
        ]
        if written:
            conn.exec_driver_sql(self._insert_sql, written)

    def _latest(self, conn: Connection, rows: list[dict[str, Any]]) -> None:
        written = time.time()
        conn.execute(latest_upsert(self._dialect), [row | {"updated_at": written} for row in latest_per_series(rows)])

    def _nodes(
        self, conn: Connection, rows: list[dict[str, Any]], *, received_at: float, kind: SourceKind, token_id: str
    ) -> None:
        """Register or refresh each node, with the median interval between its scrapes in these rows; a node an
        agent reports is never taken (the receiver refused it; this holds against an agent's first push racing)."""
        upsert = insert_for(self._dialect, nodes)
        n = nodes.c
        upsert = upsert.on_conflict_do_update(
            index_elements=["id"],
            set_={
                "last_seen": upsert.excluded.last_seen,
                "last_sample_ts": later_of(n.last_sample_ts, upsert.excluded.last_sample_ts),
                "source": upsert.excluded.source,
                # a measured interval, else the one measured before, else the first scrape's assumption
                "resolution_seconds": func.coalesce(
                    func.nullif(upsert.excluded.resolution_seconds, UNMEASURED_SCRAPE_SECONDS),
                    n.resolution_seconds,
                    UNMEASURED_SCRAPE_SECONDS,
                ),
            },
            where=n.source != AGENT_SOURCE,
        )
        conn.execute(
            upsert,
            [
                _node_row(node, node_rows, received_at, kind) | {"remote_token_id": token_id}
                for node, node_rows in sorted(_by_node(rows).items())
            ],
        )

    def _devices(
        self, conn: Connection, staged: list[StagedSeries], memory: dict[tuple[str, int], int], received_at: float
    ) -> None:
        """A GPU's model, UUID and driver from the labels its exporter puts on every series (dcgm-exporter's), and
        its memory size where the scrape gave one; what this request does not say is kept as stored."""
        found: dict[tuple[str, int], dict[str, str | None]] = {}
        for s in staged:
            wanted = self._mapping.by_name[s.place.source].spec.device_labels
            if s.place.device is None or not wanted or (s.place.node_id, s.place.device) in found:
                continue
            described: dict[str, str | None] = {field: s.labels.get(label) for field, label in wanted.items()}
            if any(described.values()):
                found[(s.place.node_id, s.place.device)] = described
        empty = dict.fromkeys(("name", "uuid", "driver_version"))
        rows = [
            {"node_id": node, "index": index, "memory_total_bytes": memory.get((node, index))}
            | {k: v or None for k, v in (empty | found.get((node, index), {})).items()}  # within its column
            for node, index in sorted(set(found) | set(memory))
        ]
        rows = self._described.changed(rows, received_at)
        if not rows:
            return
        upsert = insert_for(self._dialect, devices)
        kept = ("name", "uuid", "driver_version", "memory_total_bytes")
        upsert = upsert.on_conflict_do_update(
            index_elements=["node_id", "index"],
            set_={c: func.coalesce(upsert.excluded[c], devices.c[c]) for c in kept}
            | {"updated_at": upsert.excluded.updated_at},
        )
        conn.execute(upsert, [row | {"updated_at": received_at} for row in rows])

    def forget(self) -> None:
        """Forget what was written: the transaction that wrote it rolled back."""
        self._described.clear()

    def _backlog(self, conn: Connection, rows: list[dict[str, Any]]) -> None:
        """Every (node, minute) of the rows, for the rollup job to roll from the raw samples: derived samples do not
        reach the write path's minute aggregates (collector.minute_rollups), and a scrape's minute is rolled once the
        processes settled it."""
        touched = {(row["node_id"], bucket_start(row["ts"])) for row in rows}
        if touched:
            conn.execute(backlog_upsert(self._dialect), [{"node_id": n, "bucket": b} for n, b in sorted(touched)])


def _node_row(node: str, rows: list[dict[str, Any]], received_at: float, kind: SourceKind) -> dict[str, Any]:
    intervals = [r["extra"]["resolution_seconds"] for r in rows if "resolution_seconds" in (r["extra"] or {})]
    return {
        "id": node,
        "first_seen": received_at,
        "last_seen": received_at,
        "last_sample_ts": max(r["ts"] for r in rows),
        "source": kind,
        "resolution_seconds": round(median(intervals), 3) if intervals else UNMEASURED_SCRAPE_SECONDS,
    }


def _by_node(rows: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    found: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        found.setdefault(row["node_id"], []).append(row)
    return found


def latest_per_series(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The newest row of each (node, device, pool) series, in key order so concurrent upserts lock rows alike."""
    latest: dict[tuple[str, int, str], dict[str, Any]] = {}
    for row in rows:
        key = (row["node_id"], row["device"], row["pool"])
        kept = latest.get(key)
        if kept is None or row["ts"] >= kept["ts"]:
            latest[key] = row
    return [{k: v for k, v in latest[key].items() if k != "seq"} for key in sorted(latest)]


def remote_seq(group: int, ts: float) -> int:
    """The ``samples.seq`` of a group's sample at ``ts``: negative, so it never meets an agent's (they count up)."""
    return -(stable_id(str(group), repr(round(ts, 3))) & _SEQ_BITS) - 1


def sample_row(
    place: SeriesPlace, group: int, ts: float, metrics: dict[str, float], extra: dict[str, Any]
) -> dict[str, Any]:
    """A group's sample at ``ts`` as ``samples`` holds it."""
    return {
        "node_id": place.node_id,
        "seq": remote_seq(group, ts),
        "ts": ts,
        "device": NO_DEVICE if place.device is None else place.device,
        "pool": NO_POOL if place.pool is None else place.pool,
        "extra": extra,
        **{name: metrics.get(name) for name in METRIC_NAMES},
    }

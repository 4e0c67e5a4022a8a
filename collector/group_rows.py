"""A group commit's batches as one set of rows, and what the writer derives from them without a dict per row: the
rows new to the group, each node's upsert, each series' latest values and the minutes the rollups passed."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from collector.batch import NO_POOL_INDEX, SampleBatch
from collector.rollups import bucket_start
from collector.tables import NO_POOL, ROLLUP_BUCKET_SECONDS
from wire.catalog import METRIC_NAMES


@dataclass(frozen=True, eq=False)
class GroupRows:
    """Every batch's rows one after the other: row ``i`` belongs to node ``node_ids[node[i]]``, its pool is
    ``pool_names[pool[i]]`` (``""``: none, as stored), its device ``device[i]`` (-1: none), ``values[i]`` NaN where
    absent, and ``extras`` by row; batch ``b`` is the rows ``spans[b]``."""

    node_ids: tuple[str, ...]
    node: NDArray[np.int32]
    seq: NDArray[np.int64]
    ts: NDArray[np.float64]
    device: NDArray[np.int32]
    pool_names: tuple[str, ...]
    pool: NDArray[np.int32]
    values: NDArray[np.float64]
    extras: dict[int, Any]
    spans: tuple[slice, ...]

    def __len__(self) -> int:
        return len(self.seq)


def group_rows(batches: Sequence[SampleBatch]) -> GroupRows:
    """The batches' rows concatenated, node and pool names numbered across the group."""
    node_ids: dict[str, int] = {}
    pool_names: dict[str, int] = {NO_POOL: 0}
    nodes, pools, extras, spans = [], [], {}, []
    start = 0
    for batch in batches:
        count = len(batch)
        nodes.append(np.full(count, node_ids.setdefault(batch.node_id, len(node_ids)), dtype=np.int32))
        local = np.array([pool_names.setdefault(name, len(pool_names)) for name in batch.pools] + [0], dtype=np.int32)
        pools.append(local[batch.pool])  # NO_POOL_INDEX (-1) picks the trailing 0: no pool
        extras.update({start + row: extra for row, extra in batch.extras.items()})
        spans.append(slice(start, start + count))
        start += count
    assert NO_POOL_INDEX == -1
    return GroupRows(
        node_ids=tuple(node_ids),
        node=_joined(nodes, np.int32),
        seq=_joined([b.seq for b in batches], np.int64),
        ts=_joined([b.ts for b in batches], np.float64),
        device=_joined([b.device for b in batches], np.int32),
        pool_names=tuple(pool_names),
        pool=_joined(pools, np.int32),
        values=np.concatenate([b.values for b in batches]) if batches else np.empty((0, len(METRIC_NAMES))),
        extras=extras,
        spans=tuple(spans),
    )


def _joined(parts: list[NDArray[Any]], dtype: type) -> NDArray[Any]:
    return np.concatenate(parts).astype(dtype, copy=False) if parts else np.empty(0, dtype=dtype)


def first_of_each_key(rows: GroupRows) -> NDArray[np.intp]:
    """The rows whose ``(node, seq)`` no earlier row of the group carries: a resend within one commit is the first
    batch's, the later copies duplicates without reaching the database."""
    order = np.lexsort((np.arange(len(rows)), rows.seq, rows.node))
    node, seq = rows.node[order], rows.seq[order]
    first = np.ones(len(rows), dtype=bool)
    first[1:] = (node[1:] != node[:-1]) | (seq[1:] != seq[:-1])
    return np.sort(order[first])


def node_upserts(rows: GroupRows, batches: Sequence[tuple[str, float]]) -> list[dict[str, Any]]:
    """One node row per node with samples, in node order: its newest sample, seq and arrival (``batches``: each
    batch's node and arrival, in group order)."""
    by_node: dict[str, dict[str, Any]] = {}
    for (node_id, received_at), span in zip(batches, rows.spans, strict=True):
        if span.stop == span.start:
            continue
        row = {
            "id": node_id,
            "first_seen": received_at,
            "last_seen": received_at,
            "last_sample_ts": float(rows.ts[span].max()),
            "last_seq": int(rows.seq[span].max()),
        }
        kept = by_node.get(node_id)
        if kept is not None:
            row = {k: min(v, kept[k]) if k == "first_seen" else max(v, kept[k]) for k, v in row.items()}
        by_node[node_id] = row
    return [by_node[n] for n in sorted(by_node)]


def latest_rows(rows: GroupRows, new: NDArray[np.intp], *, updated_at: float) -> list[dict[str, Any]]:
    """The newest of the ``new`` rows of each (node, device, pool) series as a ``series_latest`` row, in key order so
    concurrent upserts lock rows alike; of two with the same ``ts`` the later row."""
    if not len(new):
        return []
    order = new[np.lexsort((new, rows.ts[new], rows.pool[new], rows.device[new], rows.node[new]))]
    last = np.ones(len(order), dtype=bool)
    key = (rows.node[order], rows.device[order], rows.pool[order])
    last[:-1] = (key[0][1:] != key[0][:-1]) | (key[1][1:] != key[1][:-1]) | (key[2][1:] != key[2][:-1])
    latest = [_latest_row(rows, int(row)) | {"updated_at": updated_at} for row in order[last]]
    return sorted(latest, key=lambda r: (r["node_id"], r["device"], r["pool"]))


def _latest_row(rows: GroupRows, row: int) -> dict[str, Any]:
    out: dict[str, Any] = {
        "node_id": rows.node_ids[rows.node[row]],
        "device": int(rows.device[row]),
        "pool": rows.pool_names[rows.pool[row]],
        "ts": float(rows.ts[row]),
        "extra": rows.extras.get(row),
    }
    for name, value in zip(METRIC_NAMES, rows.values[row].tolist(), strict=True):
        out[name] = None if math.isnan(value) else value  # NaN: absent
    return out


def late_rows(rows: GroupRows, new: NDArray[np.intp], late_before: float) -> NDArray[np.bool_]:
    """Which of the ``new`` rows are late: their minute started before ``late_before`` (the arrival less the rollup
    lookback). A minute is late or not as a whole for a batch, so its rows either all reach the write path's
    aggregates or all go through the rollup backlog, re-rolled from the raw samples."""
    return np.floor_divide(rows.ts[new], ROLLUP_BUCKET_SECONDS) * ROLLUP_BUCKET_SECONDS < late_before


def late_buckets(rows: GroupRows, new: NDArray[np.intp], late_before: float) -> set[float]:
    """The minutes (bucket starts) of the late ``new`` rows (:func:`late_rows`): those the rollup job rolls again."""
    return {bucket_start(t) for t in rows.ts[new[late_rows(rows, new, late_before)]].tolist()}

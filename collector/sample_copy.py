"""PostgreSQL's binary ``COPY`` stream of a group commit's samples, built from the columns in whole blocks.

A binary COPY row is its field count, then each field as a 4-byte length (-1: NULL) and its bytes, big-endian. The
12 metric values travel as one ``float8[12]`` with NaN where a sample lacks one (the move into ``samples`` turns NaN
back into NULL), so every row of one node- and pool-name length has the same layout: the rows of a layout are one
numpy structured array, filled column by column and written with one ``tobytes`` — no Python object per row or
value. A row with ``extra`` (its JSON text of its own length) is a block of one. The stream ends each row with its
place in the group (``idx``), which the insert answers for the rows that were new.
"""

from __future__ import annotations

import json
import struct
from functools import cache
from typing import Any

import numpy as np
from numpy.typing import NDArray

from collector.batch import METRIC_COUNT
from collector.group_rows import GroupRows

COPY_COLUMNS: tuple[str, ...] = ("node_id", "seq", "ts", "device", "pool", "metrics", "extra", "idx")
HEADER = b"PGCOPY\n\xff\r\n\x00" + struct.pack(">ii", 0, 0)
FLOAT8_OID = 701
# a one-dimensional float8 array without NULLs, of METRIC_COUNT elements from index 1
_ARRAY_HEAD = np.frombuffer(struct.pack(">iiiii", 1, 0, FLOAT8_OID, METRIC_COUNT, 1), dtype=">i4")
TRAILER = struct.pack(">h", -1)


def binary_copy(rows: GroupRows, only: NDArray[np.intp]) -> bytes:
    """The COPY stream of the rows ``only`` (indexes into ``rows``), header and trailer included."""
    node_bytes = np.array([n.encode() for n in rows.node_ids] or [b""], dtype=np.bytes_)
    pool_bytes = np.array([p.encode() for p in rows.pool_names] or [b""], dtype=np.bytes_)
    node_length = np.char.str_len(node_bytes)[rows.node[only]].astype(np.int64)
    pool_length = np.char.str_len(pool_bytes)[rows.pool[only]].astype(np.int64)
    layout = (node_length << 20) | pool_length
    has_extra = np.array([int(i) in rows.extras for i in only.tolist()], dtype=bool) if rows.extras else None
    blocks = [HEADER]
    plain = only if has_extra is None else only[~has_extra]
    plain_layout = layout if has_extra is None else layout[~has_extra]
    kinds, which = np.unique(plain_layout, return_inverse=True)
    for kind_index, kind in enumerate(kinds.tolist()):
        chosen = plain[which == kind_index]
        blocks.append(_block(rows, chosen, node_bytes, pool_bytes, kind, b""))
    if has_extra is not None:
        for row, kind in zip(only[has_extra].tolist(), layout[has_extra].tolist(), strict=True):
            text = json.dumps(rows.extras[row], separators=(",", ":")).encode()
            blocks.append(_block(rows, np.array([row]), node_bytes, pool_bytes, kind, text))
    blocks.append(TRAILER)
    return b"".join(blocks)


def _block(
    rows: GroupRows,
    chosen: NDArray[np.intp],
    node_bytes: NDArray[np.bytes_],
    pool_bytes: NDArray[np.bytes_],
    kind: int,
    extra: bytes,
) -> bytes:
    node_length, pool_length = kind >> 20, kind & 0xFFFFF
    block = np.empty(len(chosen), _layout(node_length, pool_length, len(extra)))
    block["fields"] = len(COPY_COLUMNS)
    block["node_length"] = node_length
    if node_length:
        block["node_id"] = node_bytes[rows.node[chosen]]
    _fixed(block, "seq", rows.seq[chosen])
    _fixed(block, "ts", rows.ts[chosen])
    _fixed(block, "device", rows.device[chosen])
    block["pool_length"] = pool_length
    if pool_length:
        block["pool"] = pool_bytes[rows.pool[chosen]]
    block["metrics_length"] = block.dtype["metrics_head"].itemsize + block.dtype["metrics"].itemsize
    block["metrics_head"] = _ARRAY_HEAD
    block["metrics"]["length"] = 8
    block["metrics"]["value"] = rows.values[chosen]
    block["extra_length"] = len(extra) if extra else -1
    if extra:
        block["extra"] = extra
    _fixed(block, "idx", chosen)
    return block.tobytes()


def _fixed(block: NDArray[np.void], field: str, values: NDArray[np.generic]) -> None:
    block[f"{field}_length"] = block.dtype[field].itemsize
    block[field] = values


_ELEMENT = np.dtype([("length", ">i4"), ("value", ">f8")])


@cache
def _layout(node_length: int, pool_length: int, extra_length: int) -> np.dtype[np.void]:
    """The row of one layout as a packed big-endian struct: each field's length before its bytes."""
    fields: list[tuple[Any, ...]] = [("fields", ">i2"), ("node_length", ">i4")]
    fields += [("node_id", f"S{node_length}")] if node_length else []
    fields += [("seq_length", ">i4"), ("seq", ">i8"), ("ts_length", ">i4"), ("ts", ">f8")]
    fields += [("device_length", ">i4"), ("device", ">i4"), ("pool_length", ">i4")]
    fields += [("pool", f"S{pool_length}")] if pool_length else []
    fields += [("metrics_length", ">i4"), ("metrics_head", ">i4", (5,)), ("metrics", _ELEMENT, (METRIC_COUNT,))]
    fields.append(("extra_length", ">i4"))
    fields += [("extra", f"S{extra_length}")] if extra_length else []
    fields += [("idx_length", ">i4"), ("idx", ">i4")]
    return np.dtype(fields)

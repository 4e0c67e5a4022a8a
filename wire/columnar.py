"""The compact batch encoding of ``POST /api/v1/ingest`` (CONTRACT section 5): the samples as columns, built with
the standard library alone, so the agent needs nothing more to send it.

A collector that takes it says so in every ingest answer (``Accept-Post`` lists ``MEDIA_TYPE``); the agent sends it
only once offered, and a compact batch refused ``422`` (an older collector behind the same address) again as JSON.
The layout, all little-endian:

    b"FPC1"                         magic and version
    uint32  H                       length of the header
    H bytes header                  UTF-8 JSON: {"node_id", "samples": N, "pools": [...], "extra": {"<i>": {...}},
                                    "report": {...}, "inventory": {...}} ("pools", "extra", "report", "inventory"
                                    may be left out)
    int64[N]   seq
    float64[N] ts
    int16[N]   device                -1: none
    int16[N]   pool                  index into the header's "pools"; -1: none
    uint16[N]  present               bit i: the sample carries catalog metric i (``wire.catalog.METRICS`` order)
    float64[P] values                the carried values only, sample by sample, each in catalog order; P = the
                                     number of bits set in ``present``

Samples that share a tick share their schema: a GPU sample's 5 values cost 40 bytes and one bit each, not a name
and a JSON number. Every rule of the JSON form holds (ranges, NaN/Inf, a GPU metric without ``device`` …), and the
collector checks the sizes against N and P before it reads a column. A batch this layout cannot hold (a metric name
outside the catalog, a ``seq`` past 64 bits, a value that is not a number) raises :class:`NotEncodable`: the agent
sends that one as JSON, and the collector refuses it there with its reason, as it always did.
"""

from __future__ import annotations

import json
import struct
import sys
from array import array
from collections.abc import Sequence
from typing import Any

from wire.catalog import METRIC_NAMES
from wire.samples import SampleJson

MEDIA_TYPE = "application/vnd.fleetpilot.columns.v1"
MAGIC = b"FPC1"
HEADER_LENGTH = struct.Struct("<I")
NO_DEVICE = -1
NO_POOL = -1
# Bytes per sample of the fixed columns: seq 8, ts 8, device 2, pool 2, present 2.
FIXED_BYTES_PER_SAMPLE = 22
VALUE_BYTES = 8
METRIC_BITS = {name: 1 << index for index, name in enumerate(METRIC_NAMES)}


class NotEncodable(ValueError):
    """The batch holds something the compact encoding has no place for; send it as JSON."""


def encode_columns(node_id: str, samples: Sequence[SampleJson], *, report: Any = None, inventory: Any = None) -> bytes:
    """One batch in the compact encoding: the same samples, report and inventory a JSON body would carry."""
    try:
        return _encode(node_id, samples, report, inventory)
    except (TypeError, OverflowError, KeyError, ValueError) as exc:
        raise NotEncodable(str(exc)) from exc


def _encode(node_id: str, samples: Sequence[SampleJson], report: Any, inventory: Any) -> bytes:
    seq, ts, device, pool, present, values = (
        array("q"),
        array("d"),
        array("h"),
        array("h"),
        array("H"),
        array("d"),
    )
    pools: dict[str, int] = {}
    extra: dict[str, Any] = {}
    for index, sample in enumerate(samples):
        seq.append(sample["seq"])
        ts.append(sample["ts"])
        gpu = sample.get("device")
        device.append(NO_DEVICE if gpu is None else gpu)
        name = sample.get("pool")
        pool.append(NO_POOL if name is None else pools.setdefault(name, len(pools)))
        present.append(_append_values(sample["metrics"], values))
        if sample.get("extra"):
            extra[str(index)] = sample["extra"]
    header: dict[str, Any] = {"node_id": node_id, "samples": len(samples)}
    if pools:
        header["pools"] = list(pools)
    if extra:
        header["extra"] = extra
    if report is not None:
        header["report"] = report
    if inventory is not None:
        header["inventory"] = inventory
    head = json.dumps(header, separators=(",", ":")).encode()
    columns = (seq, ts, device, pool, present, values)
    if sys.byteorder != "little":
        for column in columns:
            column.byteswap()
    return b"".join((MAGIC, HEADER_LENGTH.pack(len(head)), head, *(c.tobytes() for c in columns)))


def _append_values(metrics: dict[str, float | None], values: array[float]) -> int:
    """Append a sample's carried values in catalog order; answer its ``present`` bits (``KeyError``: a name outside
    the catalog)."""
    bits = 0
    for name, value in sorted(metrics.items(), key=lambda item: METRIC_BITS[item[0]]):
        if value is not None:
            if isinstance(value, bool):
                raise TypeError(f"metrics.{name} is a boolean")
            bits |= METRIC_BITS[name]
            values.append(value)
    return bits


def decode_to_json(body: bytes) -> dict[str, Any]:
    """A compact body as the JSON body it stands for, with the standard library alone: for the agent's in-repo fake
    collector and for tests (the collector reads the columns in place, ``collector.batch_decode``). Trusts its input:
    no bound is checked here."""
    (length,) = HEADER_LENGTH.unpack_from(body, len(MAGIC))
    start = len(MAGIC) + HEADER_LENGTH.size
    header = json.loads(body[start : start + length])
    count, offset = header["samples"], start + length
    columns: list[array[Any]] = []
    for code in ("q", "d", "h", "h", "H"):
        column = array(code)
        column.frombytes(body[offset : offset + count * column.itemsize])
        offset += count * column.itemsize
        columns.append(column)
    values = array("d")
    values.frombytes(body[offset:])
    if sys.byteorder != "little":
        for column in (*columns, values):
            column.byteswap()
    seq, ts, device, pool, present = columns
    pools, extra, taken = header.get("pools", []), header.get("extra", {}), 0
    samples = []
    for i in range(count):
        metrics = {}
        for name, bit in METRIC_BITS.items():
            if present[i] & bit:
                metrics[name] = values[taken]
                taken += 1
        sample: dict[str, Any] = {"seq": seq[i], "ts": ts[i], "metrics": metrics}
        sample["device"] = None if device[i] == NO_DEVICE else device[i]
        sample["pool"] = None if pool[i] == NO_POOL else pools[pool[i]]
        sample["extra"] = extra.get(str(i), {})
        samples.append(sample)
    out = {k: v for k, v in header.items() if k in ("node_id", "report", "inventory")}
    return {**out, "samples": samples}

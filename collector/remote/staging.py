"""From foreign series to staged points: which source takes each series, where it lands, and which points are kept.

Pure: no database. ``stage`` answers, for one request, the points to store per series (with the series' place and
group) and how many points it dropped and why, in a small fixed set of reasons that the receiver counts.
"""

from __future__ import annotations

import hashlib
import math
import struct
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum

from collector.remote.mapping import SeriesMapping, SeriesPlace, Unplaced
from collector.remote.series import RemoteSeries
from collector.tables import devices
from wire.samples import METRIC_VALUE_MAX

# Prometheus marks a series gone with this NaN (model/value/value.go, StaleNaN): an end, not a value
STALE_NAN_BITS = 0x7FF0000000000002


class Dropped(StrEnum):
    """Why a point was not stored (``fleetpilot_remote_write_points_total{outcome=...}``)."""

    UNMAPPED = "unmapped"  # no source of the mapping takes the series
    NO_NODE = "no_node"  # its source found none of its node labels
    BAD_DEVICE = "bad_device"  # the GPU label is not a small integer
    BAD_NAME = "bad_name"  # a node or pool name agent ingest's NAME_PATTERN refuses
    LABEL_TOO_LONG = "label_too_long"  # a label past max_label_bytes, or past the devices column it lands in
    SERIES_LIMIT = "series_limit"  # a new series past its source's max_series
    STALE_MARKER = "stale_marker"  # Prometheus' end-of-series marker
    NOT_FINITE = "not_finite"  # NaN or ±Inf
    OUT_OF_RANGE = "out_of_range"  # past agent ingest's value bounds (raw past ±2⁶³, or a derived metric's range)
    AGENT_NODE = "agent_node"  # a node an agent reports (or an agent token names): never written by remote write
    OUT_OF_SCOPE = "out_of_scope"  # a node outside the token's node scope
    NODE_LIMIT = "node_limit"  # a new node past the token's max_nodes_per_token
    TOO_OLD = "too_old"  # older than the receiver's window
    TOO_NEW = "too_new"  # further in the future than the contract allows
    CONFLICT = "conflict"  # another value for a time already stored (Prometheus: duplicate sample for timestamp)
    # OTLP only (collector.remote.otlp): what it cannot convert
    UNCONVERTED = "unconverted"


@dataclass(frozen=True)
class Placed:
    """Where one series lands and what it is: its ids, place, family, own name and labels."""

    series_id: int
    group_id: int
    place: SeriesPlace
    family: str
    name: str
    labels: Mapping[str, str]  # without __name__


class StagedSeries:
    """One series of a request that is kept: where it lands (its ``Placed``'s fields) and the points to store. A
    plain class with slots: one is made per series and request, where a frozen dataclass' init costs 4 × as much."""

    __slots__ = ("family", "group_id", "labels", "name", "place", "points", "series_id")

    def __init__(self, placed: Placed, points: tuple[tuple[float, float], ...]) -> None:
        self.series_id = placed.series_id
        self.group_id = placed.group_id
        self.place = placed.place
        self.family = placed.family
        self.name = placed.name
        self.labels = placed.labels
        self.points = points


@dataclass
class Staged:
    series: list[StagedSeries] = field(default_factory=list)
    dropped: Counter[str] = field(default_factory=Counter)
    details: dict[str, str] = field(default_factory=dict)  # the first of each reason, said so a sender can fix it
    unmapped: Counter[str] = field(default_factory=Counter)  # the unmapped points by series name

    def drop(self, unplaced: Unplaced, points: int) -> None:
        self.dropped[unplaced.reason] += points
        if unplaced.detail:
            self.details.setdefault(unplaced.reason, unplaced.detail)


def stable_id(*parts: str) -> int:
    """A signed 64-bit id, the same in every process and release (BIGINT columns): blake2b of the parts."""
    digest = hashlib.blake2b("\x1f".join(parts).encode(), digest_size=8).digest()
    value: int = struct.unpack(">q", digest)[0]
    return value


def series_id(labels: Mapping[str, str]) -> int:
    return stable_id(*(f"{k}\x1e{v}" for k, v in sorted(labels.items())))


def group_id(place: SeriesPlace) -> int:
    device = "" if place.device is None else str(place.device)
    return stable_id(place.source, place.node_id, device, place.pool or "")


class Placements:
    """Where each series lands, worked out once per label set: the same series come back every scrape, and the
    mapping, the place and two hashes cost more than storing their points. Bounded: forgotten whole past
    ``max_entries`` or ``max_bytes`` of labels (a rare rebuild beats unbounded growth under cardinality churn); a
    label past ``max_label_bytes`` is refused before it is kept (a 1 MiB label value was stored)."""

    def __init__(
        self, mapping: SeriesMapping, *, max_label_bytes: int, max_entries: int = 200_000, max_bytes: int = 64 << 20
    ) -> None:
        self.mapping = mapping
        self._max_label_bytes = max_label_bytes
        self._max_entries = max_entries
        self._max_bytes = max_bytes
        self._bytes = 0
        self._known: dict[tuple[tuple[str, str], ...], Placed | Unplaced] = {}

    def of(self, labels: Mapping[str, str]) -> Placed | Unplaced:
        """The series' placing, or why it has none (a ``Dropped`` value, and what to fix)."""
        key = tuple(labels.items())
        found = self._known.get(key)
        if found is None:
            too_long = _label_too_long(labels, self._max_label_bytes)
            if too_long is not None:
                return too_long
            size = sum(len(k) + len(v) for k, v in key)
            if len(self._known) >= self._max_entries or self._bytes + size > self._max_bytes:
                self._known.clear()
                self._bytes = 0
            found = self._known[key] = self._place(labels)
            self._bytes += size
        return found

    def _place(self, labels: Mapping[str, str]) -> Placed | Unplaced:
        found = self.mapping.source_of(labels)
        if found is None:
            return Unplaced(Dropped.UNMAPPED)
        source, family = found
        place = source.place(labels)
        if isinstance(place, Unplaced):
            return place
        for column, label in source.spec.device_labels.items():
            value, room = labels.get(label), getattr(devices.c[column].type, "length", None)
            if value is not None and room is not None and len(value) > room:
                return Unplaced(
                    Dropped.LABEL_TOO_LONG,
                    f"label {label!r}: {len(value)} characters, over the {room} a GPU's {column} holds",
                )
        others = {k: v for k, v in labels.items() if k != "__name__"}
        return Placed(series_id(labels), group_id(place), place, family, labels["__name__"], others)


def _label_too_long(labels: Mapping[str, str], limit: int) -> Unplaced | None:
    """The first label whose name or value is over ``limit`` bytes in UTF-8 (4 bytes a character at most)."""
    for name, value in labels.items():
        for text in (name, value):
            if len(text) * 4 > limit and len(text.encode()) > limit:
                return Unplaced(
                    Dropped.LABEL_TOO_LONG,
                    f"label {name[:80]!r}: {len(text.encode())} bytes, over remote_write_max_label_bytes ({limit})",
                )
    return None


def stage(
    series: Sequence[RemoteSeries],
    placements: Placements,
    *,
    now: float,
    oldest: float,
    max_future_seconds: float,
) -> Staged:
    """The points of ``series`` to store; points before ``oldest`` or past ``now + max_future_seconds`` dropped."""
    staged = Staged()
    newest = now + max_future_seconds
    for one in series:
        placed = placements.of(one.labels)
        if isinstance(placed, Unplaced):
            staged.drop(placed, len(one.samples))
            if placed.reason == Dropped.UNMAPPED:
                staged.unmapped[one.labels.get("__name__", "")] += len(one.samples)
            continue
        if all(oldest <= ts <= newest and -METRIC_VALUE_MAX <= value <= METRIC_VALUE_MAX for ts, value in one.samples):
            staged.series.append(StagedSeries(placed, one.samples))  # the usual case: every one kept
            continue
        points = []
        for ts, value in one.samples:
            reason = _problem(ts, value, oldest, newest)
            if reason is None:
                points.append((ts, value))
            elif reason is Dropped.OUT_OF_RANGE:
                staged.drop(Unplaced(reason, _out_of_range(placed.name, value)), 1)
            else:
                staged.dropped[reason] += 1
        if points:
            staged.series.append(StagedSeries(placed, tuple(points)))
    return staged


def _problem(ts: float, value: float, oldest: float, newest: float) -> Dropped | None:
    if not math.isfinite(value):
        stale = math.isnan(value) and struct.unpack(">Q", struct.pack(">d", value))[0] == STALE_NAN_BITS
        return Dropped.STALE_MARKER if stale else Dropped.NOT_FINITE
    if abs(value) > METRIC_VALUE_MAX:  # its sums would overflow: 1.7e308 W on two GPUs made every node view 500
        return Dropped.OUT_OF_RANGE
    if ts < oldest:
        return Dropped.TOO_OLD
    if ts > newest:
        return Dropped.TOO_NEW
    return None


def _out_of_range(name: str, value: float) -> str:
    return f"{name} value {value:.3g} is past ±{METRIC_VALUE_MAX:.2g} (2^63, agent ingest's bound)"

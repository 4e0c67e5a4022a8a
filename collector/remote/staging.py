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

from collector.remote.mapping import SeriesMapping, SeriesPlace
from collector.remote.series import RemoteSeries

# Prometheus marks a series gone with this NaN (model/value/value.go, StaleNaN): an end, not a value
STALE_NAN_BITS = 0x7FF0000000000002


class Dropped(StrEnum):
    """Why a point was not stored (``fleetpilot_remote_write_points_total{outcome=...}``)."""

    UNMAPPED = "unmapped"  # no source of the mapping takes the series
    NO_NODE = "no_node"  # its source found none of its node labels
    BAD_DEVICE = "bad_device"  # the GPU label is not a small integer
    NAME_TOO_LONG = "name_too_long"  # a node or pool name over 128 characters
    SERIES_LIMIT = "series_limit"  # a new series past its source's max_series
    STALE_MARKER = "stale_marker"  # Prometheus' end-of-series marker
    NOT_FINITE = "not_finite"  # NaN or ±Inf
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


@dataclass(frozen=True)
class StagedSeries(Placed):
    """One series of a request that is kept: where it lands and the points to store."""

    points: tuple[tuple[float, float], ...]


@dataclass
class Staged:
    series: list[StagedSeries] = field(default_factory=list)
    dropped: Counter[str] = field(default_factory=Counter)


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
    ``max_entries`` (a rare rebuild beats unbounded growth under cardinality churn)."""

    def __init__(self, mapping: SeriesMapping, *, max_entries: int = 200_000) -> None:
        self.mapping = mapping
        self._max_entries = max_entries
        self._known: dict[tuple[tuple[str, str], ...], Placed | str] = {}

    def of(self, labels: Mapping[str, str]) -> Placed | str:
        """The series' placing, or why it has none (a ``Dropped`` value)."""
        key = tuple(labels.items())
        found = self._known.get(key)
        if found is None:
            if len(self._known) >= self._max_entries:
                self._known.clear()
            found = self._known[key] = self._place(labels)
        return found

    def _place(self, labels: Mapping[str, str]) -> Placed | str:
        found = self.mapping.source_of(labels)
        if found is None:
            return Dropped.UNMAPPED
        source, family = found
        place = source.place(labels)
        if isinstance(place, str):
            return place
        others = {k: v for k, v in labels.items() if k != "__name__"}
        return Placed(series_id(labels), group_id(place), place, family, labels["__name__"], others)


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
        if isinstance(placed, str):
            staged.dropped[placed] += len(one.samples)
            continue
        points = []
        for ts, value in one.samples:
            reason = _problem(ts, value, oldest, newest)
            if reason is None:
                points.append((ts, value))
            else:
                staged.dropped[reason] += 1
        if points:
            staged.series.append(StagedSeries(**vars(placed), points=tuple(points)))
    return staged


def _problem(ts: float, value: float, oldest: float, newest: float) -> Dropped | None:
    if not math.isfinite(value):
        stale = math.isnan(value) and struct.unpack(">Q", struct.pack(">d", value))[0] == STALE_NAN_BITS
        return Dropped.STALE_MARKER if stale else Dropped.NOT_FINITE
    if ts < oldest:
        return Dropped.TOO_OLD
    if ts > newest:
        return Dropped.TOO_NEW
    return None

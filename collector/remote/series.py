"""The neutral form both foreign inputs arrive in: Prometheus-style series, whatever the wire (remote write, OTLP)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Literal, NamedTuple

SourceKind = Literal["remote_write", "otlp"]  # the wire a node's samples came by (``nodes.source``)


class RemoteSeries(NamedTuple):
    """One Prometheus series as it arrived: its labels (``__name__`` included) and its samples (Unix seconds, value).
    A named tuple: one is made per series of every body, where a frozen dataclass' init costs 3 × as much."""

    labels: Mapping[str, str]
    samples: tuple[tuple[float, float], ...]

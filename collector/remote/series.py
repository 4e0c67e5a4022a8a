"""The neutral form both foreign inputs arrive in: Prometheus-style series, whatever the wire (remote write, OTLP)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

SourceKind = Literal["remote_write", "otlp"]  # the wire a node's samples came by (``nodes.source``)


@dataclass(frozen=True)
class RemoteSeries:
    """One Prometheus series as it arrived: its labels (``__name__`` included) and its samples (Unix seconds, value)."""

    labels: Mapping[str, str]
    samples: tuple[tuple[float, float], ...]

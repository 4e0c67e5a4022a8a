"""Alert rules: what each kind watches, validated on construction (a ValueError names the field at fault).

Kinds (CONTRACT section 10):
- ``threshold``: ``metric op threshold`` held for ``for_seconds``, over every node/device/pool series
  (``group_by: series``), or over an aggregate of a pool's or the fleet's series (``group_by: pool|fleet`` with
  ``aggregate``; a pool's are its replicas', the GPUs whose samples name it, its nodes' NICs; a ``spread`` needs two).
  A per-series latency rule may give ``slo_ratio`` instead of ``threshold``: the threshold is then
  that share of each pool's ``slo_p99_seconds``, so a 10-s SLO and a 100-ms one each get their own. With ``stat``
  and ``window_seconds`` the value is that statistic over the window's 1-minute rollups (p99 of network latency
  over 5 minutes) instead of the latest sample;
- ``rate_of_change``: the change of ``metric`` over ``window_seconds`` (latest minus the first sample in the
  window), compared with ``threshold`` (ECC errors: more than 10 new ones within an hour);
- ``predictive``: the predictor's saturation probability at or above ``probability`` within ``horizon_seconds``;
- ``absent``: a node silent for ``silent_seconds`` (no ``metric``), or an up node none of whose latest readings
  carries ``metric`` (held for ``for_seconds``);
- ``event``: ``scaling_failed``, ``scaling_stuck``, ``quota_enforced`` or ``forecast_failing``.

Every kind may keep a firing alert firing for ``keep_firing_seconds`` after its condition stops holding (Prometheus'
``keep_firing_for``): one quiet minute inside a bad spell does not resolve and re-fire it.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from enum import StrEnum
from typing import Any

from alerting.signals import SIGNALS
from collector.aggregate import Stat
from wire.catalog import METRIC_NAMES
from wire.errors import FieldError

LABEL_NAME = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")
RESERVED_LABELS = frozenset({"alertname", "severity", "rule_id", "node", "gpu", "pool", "tenant", "subject"})
DEFAULT_REPEAT_SECONDS = 4 * 3600.0  # Alertmanager's default repeat_interval


class RuleKind(StrEnum):
    THRESHOLD = "threshold"
    RATE_OF_CHANGE = "rate_of_change"
    PREDICTIVE = "predictive"
    ABSENT = "absent"
    EVENT = "event"


class Severity(StrEnum):
    INFO = "info"
    WARNING = "warning"
    CRITICAL = "critical"


class Op(StrEnum):
    GT = ">"
    GE = ">="
    LT = "<"
    LE = "<="

    def holds(self, value: float, threshold: float) -> bool:
        if self is Op.GT:
            return value > threshold
        if self is Op.GE:
            return value >= threshold
        if self is Op.LT:
            return value < threshold
        return value <= threshold


class GroupBy(StrEnum):
    SERIES = "series"  # one alert per node/device/pool series
    POOL = "pool"  # one per pool, over its replicas' series (GPU and node metrics: the nodes running the pool)
    FLEET = "fleet"  # one for the whole fleet


class Aggregate(StrEnum):
    SUM = "sum"
    AVG = "avg"
    MAX = "max"
    MIN = "min"
    SPREAD = "spread"  # max − min: how unevenly a pool's nodes are used


class EventKind(StrEnum):
    SCALING_FAILED = "scaling_failed"  # an actuation failed within window_seconds
    SCALING_STUCK = "scaling_stuck"  # desired replicas differ from ready ones for for_seconds
    QUOTA_ENFORCED = "quota_enforced"  # a tenant throttled for breaking its share within window_seconds
    FORECAST_FAILING = "forecast_failing"  # a subject's last forecast attempt failed (stale forecast)


class SubjectKind(StrEnum):
    """What a predictive rule watches (the predictor's subject kinds)."""

    POOL = "pool"
    DEVICE = "device"
    REPLICAS = "replicas"


@dataclass(frozen=True)
class RuleSpec:
    name: str
    kind: RuleKind
    severity: Severity = Severity.WARNING
    for_seconds: float = 0.0
    metric: str | None = None
    op: Op | None = None
    threshold: float | None = None
    group_by: GroupBy = GroupBy.SERIES
    aggregate: Aggregate | None = None
    stat: Stat | None = None
    window_seconds: float | None = None
    pool: str | None = None  # only this pool's series (and the nodes running it)
    probability: float | None = None
    horizon_seconds: float | None = None
    subject_kind: SubjectKind = SubjectKind.POOL
    silent_seconds: float | None = None
    event: EventKind | None = None
    repeat_interval_seconds: float = DEFAULT_REPEAT_SECONDS
    keep_firing_seconds: float = 0.0  # a firing alert stays firing this long after its condition stops holding
    slo_ratio: float | None = None  # threshold: this share of each pool's latency SLO instead of ``threshold``
    labels: Mapping[str, str] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)
    enabled: bool = True

    def __post_init__(self) -> None:
        _coerce_enums(self)
        if not self.name.strip() or len(self.name) > 200:
            raise FieldError("name", "must be 1 to 200 characters")
        _non_negative("for_seconds", self.for_seconds)
        _non_negative("keep_firing_seconds", self.keep_firing_seconds)
        _positive("repeat_interval_seconds", self.repeat_interval_seconds)
        _check_labels(self.labels, self.annotations)
        _check_slo_ratio(self)
        CHECKS[self.kind](self)


def _coerce_enums(spec: RuleSpec) -> None:
    """Accept the enums' string values (JSON, the database); an unknown one is a ValueError naming the field."""
    for name, enum in (
        ("kind", RuleKind),
        ("severity", Severity),
        ("op", Op),
        ("group_by", GroupBy),
        ("aggregate", Aggregate),
        ("stat", Stat),
        ("subject_kind", SubjectKind),
        ("event", EventKind),
    ):
        value = getattr(spec, name)
        if value is None:
            continue
        try:
            object.__setattr__(spec, name, enum(value))
        except ValueError:
            raise FieldError(name, f"{value!r} is not one of {', '.join(e.value for e in enum)}") from None
    for name in ("labels", "annotations"):
        given = getattr(spec, name)
        if not isinstance(given, Mapping):  # a PATCH's null: say so, never fail on it
            raise FieldError(name, f"must be an object of names to strings, got {given!r}")
        object.__setattr__(spec, name, dict(given))


def _non_negative(name: str, value: float | None) -> None:
    if value is None or not (math.isfinite(value) and value >= 0):
        raise FieldError(name, f"must be a number >= 0, got {value}")


def _positive(name: str, value: float | None) -> None:
    if value is None or not (math.isfinite(value) and value > 0):
        raise FieldError(name, f"must be a number > 0, got {value}")


def _check_labels(labels: Mapping[str, str], annotations: Mapping[str, str]) -> None:
    for key, value in labels.items():
        if not LABEL_NAME.match(key) or key in RESERVED_LABELS:
            raise FieldError("labels", f"{key!r} is not a label name of your own (reserved: {sorted(RESERVED_LABELS)})")
        if not isinstance(value, str) or len(value) > 200:
            raise FieldError("labels", f"the value of {key!r} must be a string of at most 200 characters")
    for key, value in annotations.items():
        if not LABEL_NAME.match(key) or not isinstance(value, str) or len(value) > 2000:
            raise FieldError("annotations", f"{key!r} needs a label-like name and a string of at most 2000 characters")


SLO_METRIC = "request_latency_p99_seconds"  # what a pool's slo_p99_seconds bounds


def _metric_comparison(spec: RuleSpec) -> None:
    if spec.metric not in SIGNALS:
        known = ", ".join(sorted(SIGNALS))
        raise FieldError("metric", f"{spec.metric!r} is not a metric a rule can watch; known: {known}")
    if spec.op is None:
        raise FieldError("op", "required (one of >, >=, <, <=)")
    if spec.slo_ratio is not None:
        return  # the threshold is the pool's (_check_slo_ratio)
    if spec.threshold is None or not math.isfinite(spec.threshold):
        raise FieldError("threshold", f"must be a finite number, got {spec.threshold}")


def _check_slo_ratio(spec: RuleSpec) -> None:
    if spec.slo_ratio is None:
        return
    _positive("slo_ratio", spec.slo_ratio)
    if spec.kind is not RuleKind.THRESHOLD or spec.metric != SLO_METRIC or spec.group_by is not GroupBy.SERIES:
        raise FieldError("slo_ratio", f"only on a per-series threshold rule of {SLO_METRIC} (the SLO is per pool)")
    if spec.threshold is not None:
        raise FieldError("threshold", "give threshold or slo_ratio, not both")


def _check_threshold(spec: RuleSpec) -> None:
    _metric_comparison(spec)
    if (spec.group_by is GroupBy.SERIES) != (spec.aggregate is None):
        raise FieldError("aggregate", "required with group_by pool or fleet, and only there")
    if (spec.stat is None) != (spec.window_seconds is None):
        raise FieldError("stat", "stat and window_seconds go together (a statistic over the window's rollups)")
    if spec.stat is not None:
        if spec.metric not in METRIC_NAMES:
            raise FieldError("stat", f"only the catalog metrics have rollups, not {spec.metric!r}")
        _positive("window_seconds", spec.window_seconds)


def _check_rate_of_change(spec: RuleSpec) -> None:
    _metric_comparison(spec)
    _positive("window_seconds", spec.window_seconds)
    if spec.group_by is not GroupBy.SERIES:
        raise FieldError("group_by", "a rate_of_change rule is per series")


def _check_predictive(spec: RuleSpec) -> None:
    p = spec.probability
    if p is None or not (0 < p <= 1):
        raise FieldError("probability", f"must be in (0, 1], got {p}")
    _positive("horizon_seconds", spec.horizon_seconds)


def _check_absent(spec: RuleSpec) -> None:
    if spec.metric is None:
        _positive("silent_seconds", spec.silent_seconds)
    elif spec.metric not in SIGNALS:
        raise FieldError("metric", f"{spec.metric!r} is not a metric a rule can watch")


def _check_event(spec: RuleSpec) -> None:
    if spec.event is None:
        raise FieldError("event", f"required, one of {', '.join(e.value for e in EventKind)}")
    if spec.event in (EventKind.SCALING_FAILED, EventKind.QUOTA_ENFORCED):
        _positive("window_seconds", spec.window_seconds)


CHECKS = {
    RuleKind.THRESHOLD: _check_threshold,
    RuleKind.RATE_OF_CHANGE: _check_rate_of_change,
    RuleKind.PREDICTIVE: _check_predictive,
    RuleKind.ABSENT: _check_absent,
    RuleKind.EVENT: _check_event,
}
SPEC_FIELDS: tuple[str, ...] = tuple(f.name for f in fields(RuleSpec))


@dataclass(frozen=True)
class Rule:
    id: int
    spec: RuleSpec
    version: int
    created_at: float
    updated_at: float
    builtin: str | None = None  # the default pack's key of a shipped rule


def spec_columns(spec: RuleSpec) -> dict[str, Any]:
    """The spec as plain JSON-able values (enums as their strings)."""
    out: dict[str, Any] = {}
    for name in SPEC_FIELDS:
        value = getattr(spec, name)
        out[name] = value.value if isinstance(value, StrEnum) else dict(value) if isinstance(value, Mapping) else value
    return out

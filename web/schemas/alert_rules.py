"""The alert rules' shapes: every rule field (which ones a kind needs is in ``alerting.rules``), as a rule is
created, edited and answered."""

from __future__ import annotations

from pydantic import BaseModel, Field

from alerting.rules import (
    Aggregate,
    EventKind,
    GroupBy,
    Op,
    Rule,
    RuleKind,
    Severity,
    SubjectKind,
    spec_columns,
)
from collector.aggregate import Stat


class RuleFields(BaseModel):
    """Every rule field but name and kind; which ones a kind needs is in ``alerting.rules``."""

    model_config = {"allow_inf_nan": False}  # JSON numbers only: Infinity/NaN would not survive the answer

    severity: Severity = Severity.WARNING
    for_seconds: float = Field(0.0, ge=0, description="how long the condition must hold before the alert fires")
    metric: str | None = Field(None, description="a catalog metric, an agent extra, or request_error_ratio")
    op: Op | None = None
    threshold: float | None = None
    group_by: GroupBy = GroupBy.SERIES
    aggregate: Aggregate | None = Field(None, description="with group_by pool or fleet")
    stat: Stat | None = Field(None, description="threshold over this statistic of the window's 1-minute rollups")
    window_seconds: float | None = Field(None, gt=0)
    pool: str | None = Field(None, description="only this pool's series and the nodes running it")
    probability: float | None = Field(None, gt=0, le=1, description="predictive: saturation probability at least")
    horizon_seconds: float | None = Field(None, gt=0, description="predictive: saturation within this long")
    subject_kind: SubjectKind = SubjectKind.POOL
    silent_seconds: float | None = Field(None, gt=0, description="absent: a node silent this long")
    event: EventKind | None = None
    repeat_interval_seconds: float = Field(4 * 3600.0, gt=0)
    keep_firing_seconds: float = Field(
        0.0, ge=0, description="a firing alert stays firing this long after its condition stops holding"
    )
    slo_ratio: float | None = Field(
        None, gt=0, description="request_latency_p99_seconds only: the threshold is this share of each pool's SLO"
    )
    labels: dict[str, str] = Field(default_factory=dict)
    annotations: dict[str, str] = Field(default_factory=dict, description="summary, action: what to do")
    enabled: bool = True


class RuleIn(RuleFields):
    model_config = {
        "json_schema_extra": {
            "examples": [
                {
                    "name": "GPU memory nearly full",
                    "kind": "threshold",
                    "metric": "gpu_memory_used_bytes",
                    "op": ">",
                    "threshold": 75e9,
                    "for_seconds": 60,
                    "severity": "warning",
                    "annotations": {"summary": "GPU memory above 75 GB", "action": "move a replica"},
                }
            ]
        }
    }

    name: str = Field(min_length=1, max_length=200)
    kind: RuleKind


class RulePatch(BaseModel):
    """Any rule fields to change; the rest stay. ``version``: the version this edit is based on (409 if moved on)."""

    model_config = {
        "extra": "forbid",
        "allow_inf_nan": False,
        "json_schema_extra": {"examples": [{"threshold": 80e9, "for_seconds": 120, "enabled": True}]},
    }

    name: str | None = Field(None, min_length=1, max_length=200)
    severity: Severity | None = None
    for_seconds: float | None = Field(None, ge=0)
    metric: str | None = None
    op: Op | None = None
    threshold: float | None = None
    group_by: GroupBy | None = None
    aggregate: Aggregate | None = None
    stat: Stat | None = None
    window_seconds: float | None = Field(None, gt=0)
    pool: str | None = None
    probability: float | None = Field(None, gt=0, le=1)
    horizon_seconds: float | None = Field(None, gt=0)
    subject_kind: SubjectKind | None = None
    silent_seconds: float | None = Field(None, gt=0)
    event: EventKind | None = None
    repeat_interval_seconds: float | None = Field(None, gt=0)
    keep_firing_seconds: float | None = Field(None, ge=0)
    slo_ratio: float | None = Field(None, gt=0)
    labels: dict[str, str] | None = None
    annotations: dict[str, str] | None = None
    enabled: bool | None = None
    version: int | None = None


class RuleOut(RuleIn):
    id: int
    version: int
    builtin: str | None = Field(None, description="the default pack's key of a shipped rule")
    created_at: float
    updated_at: float


class RulePage(BaseModel):
    items: list[RuleOut]
    next: str | None = None


def rule_out(rule: Rule) -> RuleOut:
    return RuleOut(
        **spec_columns(rule.spec),
        id=rule.id,
        version=rule.version,
        builtin=rule.builtin,
        created_at=rule.created_at,
        updated_at=rule.updated_at,
    )

"""The agent → collector wire format (CONTRACT section 5) as pydantic models derived from the metric catalog.

Ranges, unknown names and NaN/Inf are checked by pydantic-core while parsing, so the hot path pays no Python loop
per metric; the few rules that need ``now`` or cross-field knowledge are checked in ``check_batch``.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, JsonValue, ValidationError, create_model
from pydantic_core import ErrorDetails

from collector.catalog import METRICS, Scope
from collector.errors import FieldProblem, InvalidBatch

NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$"


def _metric_field(minimum: float, maximum: float | None) -> Any:
    return (
        Annotated[float | None, Field(ge=minimum, le=maximum, allow_inf_nan=False)],
        None,
    )


MetricValues: type[BaseModel] = create_model(
    "MetricValues",
    __config__=ConfigDict(extra="forbid", frozen=True),
    **{m.name: _metric_field(m.minimum, m.maximum) for m in METRICS},
)


class WireSample(BaseModel):
    model_config = ConfigDict(frozen=True)

    seq: Annotated[int, Field(ge=0, strict=True)]
    ts: Annotated[float, Field(gt=0, allow_inf_nan=False)]
    device: Annotated[int, Field(ge=0, le=1023, strict=True)] | None = None
    pool: Annotated[str, Field(pattern=NAME_PATTERN)] | None = None
    metrics: MetricValues
    extra: dict[str, JsonValue] = Field(default_factory=dict)


class WireGpu(BaseModel):
    index: Annotated[int, Field(ge=0, le=1023)]
    name: str | None = Field(None, max_length=255)
    uuid: str | None = Field(None, max_length=128)
    memory_total_bytes: Annotated[int, Field(ge=0)] | None = None
    driver_version: str | None = Field(None, max_length=64)


class WireInventory(BaseModel):
    """What a node is made of; sent with the first push after the agent starts (an addition to the contract)."""

    hostname: str | None = Field(None, max_length=255)
    agent_version: str | None = Field(None, max_length=64)
    gpus: list[WireGpu] = Field(default_factory=list)


class IngestBatch(BaseModel):
    node_id: Annotated[str, Field(pattern=NAME_PATTERN)]
    samples: list[WireSample]
    inventory: WireInventory | None = None


def parse_batch(body: bytes, *, now: float, max_samples: int, max_future_seconds: float) -> IngestBatch:
    """Parse and check one JSON body; ``InvalidBatch`` names every offending sample index and field."""
    try:
        batch = IngestBatch.model_validate_json(body)
    except ValidationError as exc:
        raise InvalidBatch([_problem(err) for err in exc.errors(include_url=False)]) from None
    if len(batch.samples) > max_samples:
        raise InvalidBatch(
            [FieldProblem(None, "samples", f"{len(batch.samples)} samples, more than the limit of {max_samples}")]
        )
    problems = list(_scope_and_time_problems(batch, now=now, max_future_seconds=max_future_seconds))
    if problems:
        raise InvalidBatch(problems)
    return batch


def _scope_and_time_problems(batch: IngestBatch, *, now: float, max_future_seconds: float) -> Iterator[FieldProblem]:
    latest_allowed = now + max_future_seconds
    for index, sample in enumerate(batch.samples):
        if sample.extra:
            yield from (
                FieldProblem(index, f"extra{path}", "NaN and Inf are not allowed") for path in _non_finite(sample.extra)
            )
        if sample.ts > latest_allowed:
            yield FieldProblem(
                index,
                "ts",
                f"{sample.ts:.3f} is {sample.ts - now:.0f} s in the future (limit {max_future_seconds:.0f} s)",
            )
        # Only the metrics a sample may not carry are looked at: a device sample pays nothing for GPU metrics.
        if sample.device is None:
            yield from _misplaced(index, sample, _GPU_METRICS, "a GPU metric needs the sample's device")
        if sample.pool is None:
            yield from _misplaced(index, sample, _POOL_METRICS, "a pool metric needs the sample's pool")


def _misplaced(index: int, sample: WireSample, names: tuple[str, ...], message: str) -> Iterator[FieldProblem]:
    values = sample.metrics
    for name in names:
        if getattr(values, name) is not None:
            yield FieldProblem(index, f"metrics.{name}", message)


_GPU_METRICS = tuple(m.name for m in METRICS if m.scope is Scope.GPU)
_POOL_METRICS = tuple(m.name for m in METRICS if m.scope is Scope.POOL_REPLICA)


def _non_finite(value: JsonValue, path: str = "") -> Iterator[str]:
    """Paths of the NaN/Inf floats inside an ``extra`` value (JSON parsers accept them; the database may not)."""
    if isinstance(value, float) and not math.isfinite(value):
        yield path
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from _non_finite(item, f"{path}.{key}")
    elif isinstance(value, list):
        for position, item in enumerate(value):
            yield from _non_finite(item, f"{path}[{position}]")


def _problem(err: ErrorDetails) -> FieldProblem:
    loc = list(err["loc"])
    sample: int | None = None
    if len(loc) >= 2 and loc[0] == "samples" and isinstance(loc[1], int):
        sample = loc[1]
        loc = loc[2:]
    field = ".".join(str(part) for part in loc) or "body"
    message = err["msg"]
    if err["type"] == "extra_forbidden" and field.startswith("metrics."):
        message = "unknown metric name"
    elif "input" in err and not isinstance(err["input"], dict | list) and err["type"] != "missing":
        value = err["input"]
        shown = repr(value) if not isinstance(value, float) or math.isfinite(value) else str(value)
        message = f"{message} (got {shown[:80]})"
    return FieldProblem(sample, field, message)

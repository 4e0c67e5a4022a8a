"""The agent → collector wire format (CONTRACT section 5) as pydantic models derived from the metric catalog.

Ranges, unknown names and NaN/Inf are checked by pydantic-core while parsing, so the hot path pays no Python loop
per metric; the few rules that need ``now`` or cross-field knowledge are checked in ``parse_batch``.

The agent builds, spools and sends a sample as the plain JSON object :class:`SampleJson` types, the shape
``WireSample`` parses (tests/wire/test_samples.py holds the two to the same fields). A dict, not the model: the
sampler makes one per series every 500 ms and the spool writes it as it is, so the bytes on disk and on the wire are
what the probe read (an integer stays an integer, the metrics keep the probe's order), and a sample the collector
would refuse still travels, to be refused with the collector's reason (``inference_agent.rejected_batches``).
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Annotated, Any, NotRequired, TypedDict

from pydantic import BaseModel, ConfigDict, Field, JsonValue, ValidationError, create_model
from pydantic_core import ErrorDetails

from wire.catalog import METRICS, Scope
from wire.control import MAX_TENANTS_PER_POOL, NAME_PATTERN, NodeReport, PoolReport
from wire.errors import FieldProblem, InvalidBatch

# The largest value of the BIGINT columns the integers land in (samples.seq, nodes.last_seq,
# devices.memory_total_bytes): 2**63 - 1. One more failed the insert and answered 500 with a reset.
BIGINT_MAX = 2**63 - 1
# The replica counts agents before the NodeReport sent as a pool sample's extras (one release: docs/operations.md
# "Agents across a release"); they size what the desired state plans per replica, so they are bounded by the
# settings' node_max_replicas at the door, as a report's are.
LEGACY_REPLICA_COUNTS = ("replicas_ready", "replicas_starting")
LEGACY_REPORT_EXTRAS = (*LEGACY_REPLICA_COUNTS, "replica_consecutive_crashes", "tenants")
# The ceiling of a load metric without a natural one (bytes, watts, rates): 2**63 ≈ 9.2e18 is eight orders of
# magnitude past any real reading (an H200's 141 GB is 1.4e11 bytes, a 400 Gb/s NIC 5e10 B/s), and far enough below
# 1.8e308 that no sum of stored values overflows: two samples of 1.7e308 made every pool aggregate raise.
METRIC_VALUE_MAX = float(2**63)


def _metric_field(minimum: float, maximum: float) -> Any:
    return (
        Annotated[float | None, Field(ge=minimum, le=maximum, allow_inf_nan=False)],
        None,
    )


MetricValues: type[BaseModel] = create_model(
    "MetricValues",
    __config__=ConfigDict(extra="forbid", frozen=True),
    **{m.name: _metric_field(m.minimum, METRIC_VALUE_MAX if m.maximum is None else m.maximum) for m in METRICS},
)


class WireSample(BaseModel):
    model_config = ConfigDict(frozen=True)

    seq: Annotated[int, Field(ge=0, le=BIGINT_MAX, strict=True)]
    ts: Annotated[float, Field(gt=0, allow_inf_nan=False)]
    device: Annotated[int, Field(ge=0, le=1023, strict=True)] | None = None
    pool: Annotated[str, Field(pattern=NAME_PATTERN)] | None = None
    metrics: MetricValues
    extra: dict[str, JsonValue] = Field(default_factory=dict)


class UnsequencedSampleJson(TypedDict):
    """A sample as the agent's sampler builds it, before the spool gives it its ``seq``."""

    ts: float
    device: NotRequired[int | None]
    pool: NotRequired[str | None]
    metrics: dict[str, float | None]
    extra: NotRequired[dict[str, JsonValue]]


class SampleJson(UnsequencedSampleJson):
    """One ``samples`` entry as JSON, ``seq`` last (the spool appends it): what the agent spools and pushes and
    ``WireSample`` parses."""

    seq: int


class WireGpu(BaseModel):
    index: Annotated[int, Field(ge=0, le=1023)]
    name: str | None = Field(None, max_length=255)
    uuid: str | None = Field(None, max_length=128)
    memory_total_bytes: Annotated[int, Field(ge=0, le=BIGINT_MAX)] | None = None
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
    report: NodeReport | None = None  # the node's control state (wire.control); absent from agents before it


class _Skipped(BaseModel):
    """A sample counted and not built: its fields are ignored, so validating it allocates next to nothing."""


class _SampleCount(BaseModel):
    samples: list[_Skipped]


def parse_batch(
    body: bytes, *, now: float, max_samples: int, max_future_seconds: float, max_replicas: int
) -> IngestBatch:
    """Parse and check one JSON body; ``InvalidBatch`` names every offending sample index and field.

    The batch's ``report`` is the node's report whatever the agent's release: one from an agent before the report
    is built here from its pool samples' extras (:func:`node_report`), so nothing past this reads those extras.
    CPU-bound (a 20,000-sample body takes about a second): the web layer runs it off the event loop.
    """
    refuse_too_many_samples(body, max_samples)
    try:
        batch = IngestBatch.model_validate_json(body)
    except ValidationError as exc:
        raise InvalidBatch([_problem(err) for err in exc.errors(include_url=False)]) from None
    problems = list(_sample_problems(batch, now=now, max_future_seconds=max_future_seconds, max_replicas=max_replicas))
    if not problems:
        batch.report = node_report(batch)
        if batch.report is not None:
            problems = list(
                report_problems(batch.report, now=now, max_future_seconds=max_future_seconds, max_replicas=max_replicas)
            )
    if problems:
        raise InvalidBatch(problems)
    return batch


def node_report(batch: IngestBatch) -> NodeReport | None:
    """The node's report: the one it sent or, from an agent before the report (one release), the one its pool
    samples' extras make: each pool's newest sample carrying ``replicas_ready`` … ``tenants`` is that pool's entry,
    as of the newest of them. None for a batch with neither (an external engine probe, a bench agent).

    The one reader of those extras; ``InvalidBatch`` names the extra a bad value came from."""
    if batch.report is not None:
        return batch.report
    newest: dict[str, tuple[int, WireSample]] = {}
    for index, sample in enumerate(batch.samples):
        if sample.pool is None or not sample.extra or not any(k in sample.extra for k in LEGACY_REPORT_EXTRAS):
            continue
        kept = newest.get(sample.pool)
        if kept is None or sample.ts >= kept[1].ts:
            newest[sample.pool] = (index, sample)
    if not newest:
        return None
    pools = {pool: legacy_pool_report(index, sample.extra) for pool, (index, sample) in newest.items()}
    return NodeReport(ts=max(sample.ts for _, sample in newest.values()), pools=pools)


# A PoolReport field → the extra an agent before the report sent it as.
_LEGACY_NAMES = {
    "ready": "replicas_ready",
    "starting": "replicas_starting",
    "consecutive_crashes": "replica_consecutive_crashes",
    "tenants": "tenants",
}


def legacy_pool_report(index: int, extra: dict[str, JsonValue]) -> PoolReport:
    """A pool's entry from its sample's extras: a series without ``replicas_ready`` is one ready replica."""
    fields = {field: extra[name] for field, name in _LEGACY_NAMES.items() if name in extra}
    try:
        return PoolReport.model_validate({"ready": 1, **fields})
    except ValidationError as exc:
        problems = []
        for err in exc.errors(include_url=False):
            field, *rest = (str(part) for part in err["loc"])
            problems.append(
                FieldProblem(index, ".".join(["extra", _LEGACY_NAMES.get(field, field), *rest]), err["msg"])
            )
        raise InvalidBatch(problems) from None


def report_problems(
    report: NodeReport, *, now: float, max_future_seconds: float, max_replicas: int
) -> Iterator[FieldProblem]:
    """What the server sizes by a report, against its settings: each pool's ready + starting + draining and the
    node's total at most ``max_replicas`` (ready 200 + starting 100 is over 256), and a ``ts`` no further ahead than
    the samples' (a report from 2100 would win over every later one: the newest report is the node's state)."""
    if report.ts > now + max_future_seconds:
        yield future_ts_problem(None, "report.ts", report.ts, now=now, max_future_seconds=max_future_seconds)
    over = False
    for name, pool in report.pools.items():
        held = pool.ready + pool.starting + pool.draining
        if held > max_replicas:
            over = True
            yield FieldProblem(
                None,
                f"report.pools.{name}.ready",
                f"{held} replicas with starting and draining; at most {max_replicas}",
            )
    if not over and report.replicas > max_replicas:
        first = next(iter(report.pools))
        yield FieldProblem(
            None,
            f"report.pools.{first}.ready",
            f"{report.replicas} replicas in all; a node runs at most {max_replicas}",
        )


def refuse_too_many_samples(body: bytes, max_samples: int) -> None:
    """Refuse a body of more than ``max_samples`` samples before building any of them.

    Every sample is a JSON object, so it brings at least one ``{`` that no string can hide: a body with at most
    ``max_samples + 1`` braces (the envelope's own included) holds few enough. An agent's 500-sample batch has about
    1,500 braces against the 20,001 allowed, and counting 8 MB of them takes ~5 ms. Past that, the samples are
    counted without being built: 100,000 of them in 0.3 s and 36 MB, where building them took 1.3 s and 160 MB.
    """
    if body.count(b"{") <= max_samples + 1:
        return
    try:
        count = len(_SampleCount.model_validate_json(body).samples)
    except ValidationError:
        return  # not a batch at all: the full parse names what is wrong
    if count > max_samples:
        raise InvalidBatch([FieldProblem(None, "samples", f"{count} samples, more than the limit of {max_samples}")])


def _sample_problems(
    batch: IngestBatch, *, now: float, max_future_seconds: float, max_replicas: int
) -> Iterator[FieldProblem]:
    latest_allowed = now + max_future_seconds
    for index, sample in enumerate(batch.samples):
        if sample.extra:
            yield from extra_problems(index, sample.extra, max_replicas)
        if sample.ts > latest_allowed:
            yield future_ts_problem(index, "ts", sample.ts, now=now, max_future_seconds=max_future_seconds)
        # Only the metrics a sample may not carry are looked at: a device sample pays nothing for GPU metrics.
        if sample.device is None:
            yield from _misplaced(index, sample, GPU_METRICS, GPU_METRIC_NEEDS_DEVICE)
        if sample.pool is None:
            yield from _misplaced(index, sample, POOL_METRICS, POOL_METRIC_NEEDS_POOL)


def _misplaced(index: int, sample: WireSample, names: tuple[str, ...], message: str) -> Iterator[FieldProblem]:
    values = sample.metrics
    for name in names:
        if getattr(values, name) is not None:
            yield FieldProblem(index, f"metrics.{name}", message)


GPU_METRICS = tuple(m.name for m in METRICS if m.scope is Scope.GPU)
POOL_METRICS = tuple(m.name for m in METRICS if m.scope is Scope.POOL_REPLICA)
GPU_METRIC_NEEDS_DEVICE = "a GPU metric needs the sample's device"
POOL_METRIC_NEEDS_POOL = "a pool metric needs the sample's pool"


def future_ts_problem(
    sample: int | None, field: str, ts: float, *, now: float, max_future_seconds: float
) -> FieldProblem:
    """A ``ts`` too far ahead of the collector's clock, said alike for a sample and a report."""
    return FieldProblem(sample, field, f"{ts:.3f} is {ts - now:.0f} s in the future (limit {max_future_seconds:.0f} s)")


def extra_problems(index: int, extra: dict[str, JsonValue], max_replicas: int) -> Iterator[FieldProblem]:
    """What is wrong with sample ``index``'s ``extra``: numbers no float64 holds, and the legacy extras' bounds."""
    yield from (FieldProblem(index, f"extra{path}", why) for path, why in _unstorable_numbers(extra))
    yield from _extra_bound_problems(index, extra, max_replicas)


def _extra_bound_problems(index: int, extra: dict[str, JsonValue], max_replicas: int) -> Iterator[FieldProblem]:
    """The legacy extras the server sizes something by (:func:`node_report`), in every sample that carries them:
    replica counts (whole numbers, at most ``max_replicas`` together: ready 200 + starting 100 is over 256) and the
    tenants a sample reports usage for."""
    counts = {name: extra[name] for name in LEGACY_REPLICA_COUNTS if name in extra}
    bad = [name for name, count in counts.items() if not _is_replica_count(count, max_replicas)]
    for name in bad:
        yield FieldProblem(index, f"extra.{name}", f"a whole number of replicas from 0 to {max_replicas}")
    if not bad and sum(count for count in counts.values() if isinstance(count, int)) > max_replicas:
        yield FieldProblem(index, f"extra.{LEGACY_REPLICA_COUNTS[0]}", f"a node runs at most {max_replicas} replicas")
    tenants = extra.get("tenants")
    if isinstance(tenants, dict) and len(tenants) > MAX_TENANTS_PER_POOL:
        yield FieldProblem(
            index, "extra.tenants", f"{len(tenants)} tenants, more than the limit of {MAX_TENANTS_PER_POOL}"
        )


def _is_replica_count(value: JsonValue, max_replicas: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= max_replicas


def _unstorable_numbers(value: JsonValue, path: str = "") -> Iterator[tuple[str, str]]:
    """(path, why) of the numbers inside an ``extra`` value that are not a finite 64-bit float: NaN/Inf (JSON parsers
    accept them; the database may not) and integers past 1.8e308, whose every conversion to float raises."""
    if isinstance(value, float) and not math.isfinite(value):
        yield path, "NaN and Inf are not allowed"
    elif isinstance(value, int) and not isinstance(value, bool) and not _fits_float64(value):
        yield path, f"an integer of {len(str(abs(value)))} digits does not fit a 64-bit float"
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from _unstorable_numbers(item, f"{path}.{key}")
    elif isinstance(value, list):
        for position, item in enumerate(value):
            yield from _unstorable_numbers(item, f"{path}[{position}]")


def _fits_float64(value: int) -> bool:
    try:
        float(value)
    except OverflowError:
        return False
    return True


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

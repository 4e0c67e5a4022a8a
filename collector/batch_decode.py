"""An ingest body to a :class:`~collector.batch.SampleBatch` in one pass, whichever encoding the agent sent.

- JSON (CONTRACT section 5): msgspec decodes and checks the whole envelope in C — types, ranges, NaN/Inf, unknown
  metric names, the name patterns — into small structs whose fields go straight into columns; no pydantic model per
  sample. A body msgspec refuses goes through the wire model (``wire.samples.parse_batch``), whose errors name
  every offending sample and field as they always did; should the wire model take what msgspec refused (a number
  sent as a string), its batch is stored, so the two can only differ in cost.
- The compact encoding (``wire.columnar``): the sizes are checked against the header's sample count before a column
  is read, the columns are read as arrays in place, and every rule of the JSON form is checked on whole columns.

Either way the rules that need ``now`` are :func:`collector.batch_rules.checked`'s.
"""

from __future__ import annotations

from typing import Annotated, Any, NoReturn

import msgspec
import numpy as np
from numpy.typing import NDArray
from pydantic import ValidationError

from collector.batch import METRIC_COUNT, NO_DEVICE, NO_POOL_INDEX, Extras, SampleBatch
from wire import columnar
from wire.catalog import METRICS
from wire.control import NAME_PATTERN, NodeReport
from wire.errors import FieldProblem, InvalidBatch
from wire.samples import BIGINT_MAX, METRIC_VALUE_MAX, WireInventory, parse_batch, refuse_too_many_samples

# Python's ``$`` also matches before a final newline, which the wire model's pattern (Rust's) does not: "pool\n"
# would pass here and fail there.
_NAME = Annotated[str, msgspec.Meta(pattern=NAME_PATTERN.removesuffix("$") + r"\Z")]
_MINIMA = np.array([m.minimum for m in METRICS])
_MAXIMA = np.array([METRIC_VALUE_MAX if m.maximum is None else m.maximum for m in METRICS])
_NULL = msgspec.Raw(b"null")

_Metrics = msgspec.defstruct(
    "_Metrics",
    [
        (m.name, Annotated[float, msgspec.Meta(ge=m.minimum, le=float(_MAXIMA[i]))] | None, None)
        for i, m in enumerate(METRICS)
    ],
    forbid_unknown_fields=True,
    frozen=True,
)


class _Sample(msgspec.Struct, frozen=True):
    seq: Annotated[int, msgspec.Meta(ge=0, le=BIGINT_MAX)]
    ts: Annotated[float, msgspec.Meta(gt=0)]
    metrics: _Metrics  # type: ignore[valid-type]
    device: Annotated[int, msgspec.Meta(ge=0, le=1023)] | None = None
    pool: _NAME | None = None
    extra: dict[str, Any] = {}


class _Body(msgspec.Struct, frozen=True):
    node_id: _NAME
    samples: list[_Sample]
    inventory: msgspec.Raw = _NULL
    report: msgspec.Raw = _NULL


class _Header(msgspec.Struct, frozen=True):
    node_id: _NAME
    samples: Annotated[int, msgspec.Meta(ge=0)]
    pools: list[_NAME] = []
    extra: dict[str, dict[str, Any]] = {}
    inventory: msgspec.Raw = _NULL
    report: msgspec.Raw = _NULL


# msgspec reads JSON nested far deeper than the wire model's parser (200 levels, where it refuses the body): an
# ``extra`` nested past this goes through the wire model (JSON), or is refused (the compact encoding's header).
MAX_EXTRA_DEPTH = 100

_BODY = msgspec.json.Decoder(_Body)
_HEADER = msgspec.json.Decoder(_Header)


def decode_json(
    body: bytes, *, max_samples: int, now: float, max_future_seconds: float, max_replicas: int
) -> SampleBatch:
    """A JSON body's batch; ``InvalidBatch`` names every offending sample and field."""
    refuse_too_many_samples(body, max_samples)
    try:
        parsed = _BODY.decode(body)
        report, inventory = _envelope(parsed.report, parsed.inventory)
        for index, sample in enumerate(parsed.samples):
            if sample.extra and _deeper_than(sample.extra, MAX_EXTRA_DEPTH):
                _refuse(index, "extra", f"nested deeper than {MAX_EXTRA_DEPTH} levels")
    except (msgspec.ValidationError, msgspec.DecodeError, InvalidBatch):
        batch = parse_batch(
            body, now=now, max_samples=max_samples, max_future_seconds=max_future_seconds, max_replicas=max_replicas
        )
        return SampleBatch.from_wire(batch)
    return _json_columns(parsed, report, inventory)


def _envelope(report: msgspec.Raw, inventory: msgspec.Raw) -> tuple[NodeReport | None, WireInventory | None]:
    """The report and inventory by their wire models (small, once a batch); ``InvalidBatch`` names the field."""
    try:
        node_report = None if report == _NULL else NodeReport.model_validate_json(bytes(report))
    except ValidationError as exc:
        _refuse(None, f"report.{_first_error(exc)}", "")
    try:
        wire_inventory = None if inventory == _NULL else WireInventory.model_validate_json(bytes(inventory))
    except ValidationError as exc:
        _refuse(None, f"inventory.{_first_error(exc)}", "")
    return node_report, wire_inventory


def _json_columns(parsed: _Body, report: NodeReport | None, inventory: WireInventory | None) -> SampleBatch:
    samples = parsed.samples
    count = len(samples)
    pools: dict[str, int] = {}
    pool = [NO_POOL_INDEX if s.pool is None else pools.setdefault(s.pool, len(pools)) for s in samples]
    values = np.array([msgspec.structs.astuple(s.metrics) for s in samples], dtype=np.float64)
    return SampleBatch(
        node_id=parsed.node_id,
        seq=np.fromiter((s.seq for s in samples), np.int64, count),
        ts=np.fromiter((s.ts for s in samples), np.float64, count),
        device=np.fromiter((NO_DEVICE if s.device is None else s.device for s in samples), np.int32, count),
        pool=np.array(pool, dtype=np.int32),
        values=values.reshape(count, METRIC_COUNT),
        pools=tuple(pools),
        extras={row: s.extra for row, s in enumerate(samples) if s.extra},
        report=report,
        inventory=inventory,
    )


def decode_columns(body: bytes, *, max_samples: int) -> SampleBatch:
    """A body in the compact encoding (``wire.columnar``); ``InvalidBatch`` names what is wrong."""
    header, columns = _split(body)
    count = header.samples
    if count > max_samples:
        _refuse(None, "samples", f"{count} samples, more than the limit of {max_samples}")
    fixed = count * columnar.FIXED_BYTES_PER_SAMPLE
    if len(columns) < fixed:
        _refuse(None, "body", f"the columns hold {len(columns)} bytes; {count} samples need at least {fixed}")
    seq, ts, device, pool, present = _fixed_columns(columns, count)
    if np.any(present >> METRIC_COUNT):
        row = int(np.flatnonzero(present >> METRIC_COUNT)[0])
        _refuse(row, "metrics", "unknown metric name (a bit past the catalog's 12 in present)")
    carried = ((present[:, None] >> np.arange(METRIC_COUNT)) & 1).astype(bool)
    values_bytes = int(carried.sum()) * columnar.VALUE_BYTES
    if len(columns) != fixed + values_bytes:
        _refuse(
            None,
            "body",
            f"the columns hold {len(columns)} bytes; {count} samples with these values need {fixed + values_bytes}",
        )
    values = np.full((count, METRIC_COUNT), np.nan)
    values[carried] = np.frombuffer(columns, "<f8", offset=fixed)
    problems = _column_problems(seq, ts, device, pool, len(header.pools), values, carried)
    if problems:
        raise InvalidBatch(problems)
    report, inventory = _envelope(header.report, header.inventory)
    return SampleBatch(
        node_id=header.node_id,
        seq=seq.astype(np.int64),
        ts=ts.astype(np.float64),
        device=device.astype(np.int32),
        pool=pool.astype(np.int32),
        values=values,
        pools=tuple(header.pools),
        extras=_extras(header.extra, count),
        report=report,
        inventory=inventory,
    )


def _split(body: bytes) -> tuple[_Header, memoryview]:
    """The header, parsed, and the bytes of the columns after it."""
    if body[:4] != columnar.MAGIC or len(body) < 8:
        _refuse(None, "body", f"not the compact encoding: it starts with {columnar.MAGIC!r} and a header length")
    (length,) = columnar.HEADER_LENGTH.unpack_from(body, 4)
    if length > len(body) - 8:
        _refuse(None, "header", f"{length} bytes long, past the body's end")
    try:
        header = _HEADER.decode(memoryview(body)[8 : 8 + length])
    except (msgspec.ValidationError, msgspec.DecodeError) as exc:
        _refuse(None, "header", str(exc))
    return header, memoryview(body)[8 + length :]


def _fixed_columns(columns: memoryview, count: int) -> tuple[NDArray[Any], ...]:
    """seq, ts, device, pool and present, read in place (no copy)."""
    out, offset = [], 0
    for dtype in ("<i8", "<f8", "<i2", "<i2", "<u2"):
        column = np.frombuffer(columns, dtype, count=count, offset=offset)
        out.append(column)
        offset += column.nbytes
    return tuple(out)


def _column_problems(
    seq: NDArray[Any],
    ts: NDArray[Any],
    device: NDArray[Any],
    pool: NDArray[Any],
    pools: int,
    values: NDArray[np.float64],
    carried: NDArray[np.bool_],
) -> list[FieldProblem]:
    """What the JSON form's types and ranges would refuse, column by column, the first few of each kind."""
    problems: list[FieldProblem] = []
    limit = 100

    def each(mask: NDArray[np.bool_], field: str, why: str) -> None:
        problems.extend(FieldProblem(int(i), field, why) for i in np.flatnonzero(mask)[:limit])

    each(seq < 0, "seq", "Input should be greater than or equal to 0")
    each(~np.isfinite(ts) | (ts <= 0), "ts", "a finite number of Unix seconds greater than 0")
    each((device < NO_DEVICE) | (device > 1023), "device", "a GPU index from 0 to 1023, or none (-1)")
    each((pool < NO_POOL_INDEX) | (pool >= pools), "pool", f"an index of the header's {pools} pools, or none (-1)")
    with np.errstate(invalid="ignore"):
        bad = carried & ~(np.isfinite(values) & (values >= _MINIMA) & (values <= _MAXIMA))
    rows, columns = np.nonzero(bad)
    for row, column in zip(rows[:limit].tolist(), columns[:limit].tolist(), strict=True):
        value = float(values[row, column])
        metric = METRICS[column]
        problems.append(FieldProblem(row, f"metrics.{metric.name}", _out_of_range(value, column)))
    return sorted(problems, key=lambda p: p.sample if p.sample is not None else -1)


def _out_of_range(value: float, column: int) -> str:
    if not np.isfinite(value):
        return f"NaN and Inf are not allowed (got {value})"
    return f"must be from {_MINIMA[column]:g} to {_MAXIMA[column]:g} (got {value!r})"


def _extras(extra: dict[str, dict[str, Any]], count: int) -> Extras:
    """The header's extras by sample index; a key that names no sample is refused."""
    out: Extras = {}
    for key, value in extra.items():
        if not key.isdigit() or int(key) >= count:
            _refuse(None, "extra", f"key {key[:40]!r} is not the index of one of the {count} samples")
        if _deeper_than(value, MAX_EXTRA_DEPTH):
            _refuse(int(key), "extra", f"nested deeper than {MAX_EXTRA_DEPTH} levels")
        out[int(key)] = value
    return out


def _deeper_than(value: Any, limit: int) -> bool:
    """Whether ``value`` nests objects and lists more than ``limit`` levels deep (counted without recursion)."""
    level: list[Any] = [value]
    for _ in range(limit):
        level = [
            child
            for item in level
            for child in (item.values() if isinstance(item, dict) else item if isinstance(item, list) else ())
        ]
        if not level:
            return False
    return any(isinstance(item, dict | list) for item in level)


def _first_error(exc: ValidationError) -> str:
    """``pools.chat.ready: Input should be ...``: the first error's place and message."""
    err = exc.errors(include_url=False)[0]
    return f"{'.'.join(str(part) for part in err['loc'])}: {err['msg']}"


def _refuse(sample: int | None, field: str, message: str) -> NoReturn:
    if not message:  # the field already says what is wrong ("report.ts: Input should be ...")
        field, _, message = field.partition(": ")
    raise InvalidBatch([FieldProblem(sample, field, message)])

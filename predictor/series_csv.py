"""Read a ``timestamp,value`` CSV (CONTRACT section 7) into a regular :class:`History`.

Timestamps are ISO-8601 (``2023-11-16T18:17:00Z``; no zone means UTC) or Unix seconds. The step is the most common
difference between consecutive timestamps; a missing step (a missing row or an empty value) becomes NaN, never zero.
Every error names the line it found wrong. ``value_text`` writes a value back as text that reads as the same float,
for the outputs that repeat the input's values.
"""

from __future__ import annotations

import csv
import itertools
import math
from collections import Counter
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TextIO

import numpy as np

from predictor.base import History

HEADER = ("timestamp", "value")
_MAX_MISSING_RATIO = 10  # 2,000 rows spanning 20,000+ steps is a typo in a timestamp, not a gappy series
_EXACT_INTEGER_LIMIT = 1e16  # past it, a float's digits are not all significant: 1e+22, not 22 digits
_GRID_TOLERANCE = 1e-6  # of a step: a timestamp 0.1 s off a 600 s grid is a bad line, not rounding noise


class SeriesCsvError(ValueError):
    """The file is not a readable ``timestamp,value`` series; the message names the line."""


@dataclass(frozen=True)
class Series:
    """A regular series and one timestamp label per step (the input's text; filled in the input's style for a
    missing row)."""

    history: History
    labels: tuple[str, ...]


@dataclass(frozen=True)
class _Row:
    line: int
    label: str
    ts: float
    value: float
    iso: bool


def read_series_csv(path: Path) -> Series:
    """Parse ``path``; raises :class:`SeriesCsvError` naming the file and line of the first problem."""
    try:
        with path.open(newline="", encoding="utf-8") as handle:
            rows = _parse_rows(handle, path)
    except OSError as exc:
        raise SeriesCsvError(f"{path}: cannot read: {exc.strerror or exc}") from exc
    except UnicodeDecodeError as exc:
        raise SeriesCsvError(f"{path}: not UTF-8 text") from exc
    return _regularise(rows, path)


def _parse_rows(handle: TextIO, path: Path) -> list[_Row]:
    reader = csv.reader(handle)
    header = next(reader, None)
    if header is None or tuple(cell.strip().lower() for cell in header) != HEADER:
        raise SeriesCsvError(f"{path}:1: expected the header 'timestamp,value', got {','.join(header or [])!r}")
    rows: list[_Row] = []
    for row in reader:
        line = reader.line_num
        if not row or all(not cell.strip() for cell in row):
            continue  # a blank line is not a step
        if len(row) != 2:
            raise SeriesCsvError(f"{path}:{line}: expected 2 fields 'timestamp,value', got {len(row)}")
        parsed = _parse_row(row[0].strip(), row[1].strip(), line, path)
        if rows and parsed.ts <= rows[-1].ts:
            raise SeriesCsvError(f"{path}:{line}: timestamp {parsed.label!r} is not after line {rows[-1].line}'s")
        rows.append(parsed)
    if len(rows) < 2:
        raise SeriesCsvError(f"{path}: needs at least 2 rows to infer the step, got {len(rows)}")
    return rows


def _parse_row(label: str, text: str, line: int, path: Path) -> _Row:
    ts, iso = _parse_timestamp(label, line, path)
    if not text:
        return _Row(line, label, ts, math.nan, iso)
    try:
        value = float(text)
    except ValueError:
        raise SeriesCsvError(f"{path}:{line}: value {text!r} is not a number") from None
    if math.isinf(value):
        raise SeriesCsvError(f"{path}:{line}: value {text!r} is infinite")
    return _Row(line, label, ts, value, iso)


def _parse_timestamp(label: str, line: int, path: Path) -> tuple[float, bool]:
    try:
        seconds = float(label)
    except ValueError:
        pass
    else:
        if not math.isfinite(seconds):
            raise SeriesCsvError(f"{path}:{line}: timestamp {label!r} is not finite")
        return seconds, False
    try:
        moment = datetime.fromisoformat(label)
    except ValueError:
        raise SeriesCsvError(f"{path}:{line}: timestamp {label!r} is neither ISO-8601 nor Unix seconds") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.timestamp(), True


def _regularise(rows: list[_Row], path: Path) -> Series:
    counts = Counter(b.ts - a.ts for a, b in itertools.pairwise(rows))
    top = max(counts.values())
    step = min(diff for diff, count in counts.items() if count == top)  # a tie: a gap is a multiple of the step
    start = rows[0].ts
    size = round((rows[-1].ts - start) / step) + 1
    if size > _MAX_MISSING_RATIO * len(rows):
        raise SeriesCsvError(
            f"{path}: {len(rows)} rows span {size} steps of {step:g} s; mostly missing, or a timestamp is wrong"
        )
    values = np.full(size, np.nan)
    labels: list[str | None] = [None] * size
    for row in rows:
        offset = (row.ts - start) / step
        index = round(offset)
        if abs(offset - index) > _GRID_TOLERANCE:
            raise SeriesCsvError(
                f"{path}:{row.line}: timestamp {row.label!r} is off the {step:g} s grid starting at {rows[0].label!r}"
            )
        values[index] = row.value
        labels[index] = row.label
    iso = rows[0].iso
    filled = tuple(label or _format_ts(start + i * step, iso) for i, label in enumerate(labels))
    return Series(History(values, float(step), float(start)), filled)


def value_text(value: float) -> str:
    """``value`` as text that parses back to the same float, empty for NaN (a missing value): 1019036.0 →
    "1019036" as the input wrote it, not "1.01904e+06"; 0.1 → "0.1"; other values as Python's shortest repr."""
    value = float(value)  # a numpy float's repr is "np.float64(0.1)"
    if math.isnan(value):
        return ""
    if value.is_integer() and abs(value) < _EXACT_INTEGER_LIMIT:
        return str(int(value))
    return repr(value)


def _format_ts(ts: float, iso: bool) -> str:
    if iso:
        return datetime.fromtimestamp(ts, UTC).isoformat().replace("+00:00", "Z")
    return str(int(ts)) if float(ts).is_integer() else f"{ts:.6f}".rstrip("0")

"""Reading a ``timestamp,value`` CSV: both timestamp styles, gaps as NaN, the step inferred, bad lines named."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from predictor.series_csv import SeriesCsvError, read_series_csv, value_text


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "series.csv"
    path.write_text(text, encoding="utf-8")
    return path


def test_iso_timestamps_give_the_step_start_and_labels(tmp_path: Path) -> None:
    series = read_series_csv(write(tmp_path, "timestamp,value\n2023-11-16T18:17:00Z,3\n2023-11-16T18:18:00Z,4.5\n"))
    assert series.history.step_seconds == 60
    assert series.history.start_ts == 1_700_158_620
    np.testing.assert_array_equal(series.history.values, [3.0, 4.5])
    assert series.labels == ("2023-11-16T18:17:00Z", "2023-11-16T18:18:00Z")


def test_unix_seconds_and_a_missing_row_and_an_empty_value_become_nan(tmp_path: Path) -> None:
    series = read_series_csv(write(tmp_path, "timestamp,value\n0,1\n600,\n1800,4\n2400,5\n"))
    assert series.history.step_seconds == 600  # the most common difference, not the 1,200 s gap
    np.testing.assert_array_equal(np.isnan(series.history.values), [False, True, True, False, False])
    assert series.history.values[0] == 1 and series.history.values[-1] == 5
    assert series.labels == ("0", "600", "1200", "1800", "2400")  # the missing row's label in the input's style


def test_a_missing_iso_row_gets_an_iso_label(tmp_path: Path) -> None:
    series = read_series_csv(
        write(tmp_path, "timestamp,value\n2023-11-16T18:17:00Z,1\n2023-11-16T18:19:00Z,2\n2023-11-16T18:20:00Z,3\n")
    )
    assert series.labels[1] == "2023-11-16T18:18:00Z"
    assert math.isnan(series.history.values[1])


def test_naive_iso_timestamps_are_utc(tmp_path: Path) -> None:
    series = read_series_csv(write(tmp_path, "timestamp,value\n1970-01-01T00:10:00,1\n1970-01-01T00:20:00,2\n"))
    assert series.history.start_ts == 600


@pytest.mark.parametrize(
    ("text", "where", "why"),
    [
        ("time,value\n0,1\n60,2\n", ":1:", "header"),
        ("timestamp,value\n0,1\nyesterday,2\n", ":3:", "neither ISO-8601 nor Unix"),
        ("timestamp,value\n0,1\n60,lots\n", ":3:", "not a number"),
        ("timestamp,value\n0,1\n60,2,3\n", ":3:", "2 fields"),
        ("timestamp,value\n0,1\n60,2\n60,3\n", ":4:", "not after"),
        ("timestamp,value\n0,1\n60,2\n120,3\n150,4\n", ":5:", "grid"),
        ("timestamp,value\n0,1\n60,inf\n", ":3:", "infinite"),
        ("timestamp,value\n0,1\n", "", "at least 2 rows"),
    ],
)
def test_bad_input_names_the_line(tmp_path: Path, text: str, where: str, why: str) -> None:
    with pytest.raises(SeriesCsvError) as raised:
        read_series_csv(write(tmp_path, text))
    assert where in str(raised.value) and why in str(raised.value)


def test_a_missing_file_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(SeriesCsvError, match="cannot read"):
        read_series_csv(tmp_path / "absent.csv")


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (1019036.0, "1019036"),
        (np.float64(0.1), "0.1"),
        (-3.0, "-3"),
        (123456.789012345, "123456.789012345"),
        (2.5e-07, "2.5e-07"),
        (1e22, "1e+22"),
        (math.nan, ""),
    ],
)
def test_value_text_reads_back_as_the_same_float(value: float, text: str) -> None:
    assert value_text(value) == text
    assert text == "" or float(text) == value

"""The classify body check: every value a number in 0..1, every image 3×64×64, each bad one named by its index."""

from __future__ import annotations

import json
from typing import Any

import pytest

from inference_agent.serving.frontend.schema import BadRequest, parse_classify, parse_json


def image(value: Any = 0.5, *, at: tuple[int, int, int] = (2, 63, 63)) -> list[list[list[Any]]]:
    """A 3×64×64 image of 0.25 with ``value`` at ``at``."""
    pixels: list[list[list[Any]]] = [[[0.25] * 64 for _ in range(64)] for _ in range(3)]
    channel, row, column = at
    pixels[channel][row][column] = value
    return pixels


@pytest.mark.parametrize("value", [0, 1, 0.0, 1.0, 0.5])
def test_numbers_in_range_pass(value: float) -> None:
    assert parse_classify({"model": "c", "inputs": [image(), image(value)]}).model == "c"


@pytest.mark.parametrize(
    "value", [True, False, None, "0.5", [0.5], -0.01, 1.01, float("nan"), float("inf"), float("-inf"), 10**400]
)
@pytest.mark.parametrize("at", [(0, 0, 0), (2, 63, 63), (1, 5, 30)])  # first in its row (min/max meet it) or not
def test_anything_but_a_number_in_range_is_refused(value: Any, at: tuple[int, int, int]) -> None:
    with pytest.raises(BadRequest) as refused:
        parse_classify({"model": "c", "inputs": [image(), image(value, at=at)]})
    assert refused.value.field == "inputs.1"


def test_nan_as_json_sends_it_is_refused() -> None:
    body = parse_json(json.dumps({"model": "c", "inputs": [image(float("nan"), at=(0, 3, 7))]}).encode())
    with pytest.raises(BadRequest, match=r"inputs\.0"):
        parse_classify(body)


@pytest.mark.parametrize(
    "bad",
    [
        [[[0.5] * 64 for _ in range(64)] for _ in range(2)],  # 2 channels
        [[[0.5] * 64 for _ in range(63)] for _ in range(3)],  # 63 rows
        [[[0.5] * 63 for _ in range(64)] for _ in range(3)],  # 63 values in a row
        "an image",
    ],
)
def test_a_wrong_shape_is_refused(bad: Any) -> None:
    with pytest.raises(BadRequest, match=r"inputs\.0: an image of 3×64×64 numbers in 0\.\.1"):
        parse_classify({"model": "c", "inputs": [bad]})

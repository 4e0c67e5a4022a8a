"""Tests that need an outside program or service skip with the reason locally and fail under CI=true."""

from __future__ import annotations

import os
from typing import NoReturn

import pytest


def unavailable(reason: str) -> NoReturn:
    if os.environ.get("CI") == "true":
        pytest.fail(f"{reason} (CI=true: .ci/run must provide it)")
    pytest.skip(reason)

"""Headless Chromium (the Debian ``chromium`` package, driven by Playwright through ``executable_path``; no browser
download) against a real ``fleetpilot server`` with a real agent pushing to it."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

CHROMIUM_CANDIDATES = ("/usr/lib/chromium/chromium", "chromium", "chromium-browser")
SCREENSHOTS = Path(__file__).resolve().parent.parent / "artifacts" / "screenshots"


def chromium_path() -> str | None:
    for candidate in CHROMIUM_CANDIDATES:
        found = candidate if os.path.isfile(candidate) and os.access(candidate, os.X_OK) else shutil.which(candidate)
        if found:
            return found
    return None


def _unavailable(reason: str) -> None:
    if os.environ.get("CI") == "true":
        pytest.fail(f"{reason}; CI must have it (.ci/run installs the chromium package)")
    pytest.skip(reason)


@pytest.fixture(scope="module")
def chromium() -> Iterator[Any]:
    """A headless Chromium browser; skipped with the reason when Chromium or Playwright is missing (never under CI)."""
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        _unavailable("the playwright package is not installed (pip install -e '.[dev]')")
    path = chromium_path()
    if path is None:
        _unavailable("Chromium is not installed (apt-get install chromium)")
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=path, headless=True, args=["--no-sandbox"])
        try:
            yield browser
        finally:
            browser.close()


@pytest.fixture(scope="session")
def screenshots() -> Path:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    return SCREENSHOTS

"""The operations guide lists every server setting, so none is a secret knob."""

from __future__ import annotations

from pathlib import Path

from fleetpilot.settings import ServerSettings

ROOT = Path(__file__).resolve().parent.parent


def test_every_setting_is_documented() -> None:
    guide = (ROOT / "docs" / "operations.md").read_text()
    missing = [name for name in ServerSettings.model_fields if f"`{name}`" not in guide]
    assert missing == []


def test_readme_quick_start_has_the_two_commands() -> None:
    readme = (ROOT / "README.md").read_text()
    assert "make demo" in readme
    assert "make test" in readme

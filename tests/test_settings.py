"""Settings: flags over FLEETPILOT_* variables over defaults, validated at start."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from fleetpilot.settings import DEFAULT_DATABASE_URL, ServerSettings


def test_defaults_are_a_local_sqlite_server() -> None:
    settings = ServerSettings()
    assert (settings.host, settings.port, settings.database_url) == ("127.0.0.1", 8080, DEFAULT_DATABASE_URL)


def test_environment_variables_override_defaults_and_flags_override_both(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FLEETPILOT_PORT", "9001")
    monkeypatch.setenv("FLEETPILOT_RAW_RETENTION_HOURS", "6")
    assert ServerSettings().port == 9001
    assert ServerSettings().raw_retention_hours == 6
    assert ServerSettings(port=9002).port == 9002


@pytest.mark.parametrize(
    ("values", "field"),
    [
        ({"port": 70000}, "port"),
        ({"admin_token": "short"}, "admin_token"),
        ({"raw_retention_hours": 0}, "raw_retention_hours"),
        ({"environment": "production"}, "FLEETPILOT_DATABASE_URL"),
        ({"unknown_knob": 1}, "unknown_knob"),
    ],
)
def test_bad_or_insecure_settings_are_refused_naming_the_setting(values: dict[str, object], field: str) -> None:
    with pytest.raises(ValidationError, match=field):
        ServerSettings(**values)  # type: ignore[arg-type]

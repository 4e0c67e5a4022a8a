"""Settings: flags over FLEETPILOT_* variables over defaults, validated at start."""

from __future__ import annotations

import secrets

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


def test_the_scale_down_window_is_hpas_300_s_unless_set(monkeypatch: pytest.MonkeyPatch) -> None:
    assert ServerSettings().scale_down_window_seconds == 300.0
    monkeypatch.setenv("FLEETPILOT_SCALE_DOWN_WINDOW_SECONDS", "60")
    assert ServerSettings().scale_down_window_seconds == 60.0
    assert ServerSettings(scale_down_window_seconds=0).scale_down_window_seconds == 0.0  # HPA allows 0: no wait


def test_worker_processes_default_to_the_cores_on_postgresql_and_one_on_sqlite(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("os.cpu_count", lambda: 6)
    assert ServerSettings().worker_processes == 1  # SQLite: one writer, whatever the cores
    assert ServerSettings(database_url="postgresql://db/fp").worker_processes == 6
    assert ServerSettings(database_url="postgresql://db/fp", workers=2).worker_processes == 2
    assert ServerSettings(workers=3).worker_processes == 3  # asked for on SQLite: given


@pytest.mark.parametrize(
    ("values", "field"),
    [
        ({"port": 70000}, "port"),
        ({"admin_token": "short"}, "admin_token"),
        ({"admin_token": "fp_admin_CHANGE-ME-to-at-least-32-random-characters"}, "admin_token"),
        ({"admin_token": "an-example-admin-token-of-enough-length"}, "admin_token"),
        ({"admin_token": "ab" * 20}, "admin_token"),  # 40 characters, 2 distinct
        ({"session_secret": "x" * 48}, "session_secret"),
        ({"scrape_token": "scrape-me"}, "scrape_token"),
        ({"trusted_proxies": ["10.0.0.0/33"]}, "trusted_proxies"),
        ({"webhook_allowed_networks": ["localhost"]}, "webhook_allowed_networks"),
        ({"raw_retention_hours": 0}, "raw_retention_hours"),
        ({"workers": 0}, "workers"),
        ({"scale_down_window_seconds": -1}, "scale_down_window_seconds"),
        ({"environment": "production"}, "FLEETPILOT_DATABASE_URL"),
        ({"unknown_knob": 1}, "unknown_knob"),
    ],
)
def test_bad_or_insecure_settings_are_refused_naming_the_setting(values: dict[str, object], field: str) -> None:
    with pytest.raises(ValidationError, match=field):
        ServerSettings(**values)  # type: ignore[arg-type]


def test_generated_secrets_and_proxy_networks_are_accepted() -> None:
    fit = secrets.token_urlsafe(32)
    settings = ServerSettings(
        admin_token=f"fp_admin_{fit}", session_secret=fit, scrape_token=fit, trusted_proxies=["10.0.0.0/8", "::1"]
    )
    assert settings.scrape_token == fit

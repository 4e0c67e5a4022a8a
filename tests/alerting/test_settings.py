"""Alerting's settings: validated at start, the allow-list read from the environment as a JSON list."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from fleetpilot.settings import ServerSettings


def test_the_backoff_maximum_may_not_undercut_its_start() -> None:
    with pytest.raises(ValidationError, match="webhook_backoff_max_seconds"):
        ServerSettings(webhook_backoff_initial_seconds=10, webhook_backoff_max_seconds=5)
    with pytest.raises(ValidationError, match="alert_evaluation_interval_seconds"):
        ServerSettings(alert_evaluation_interval_seconds=0)


def test_allowed_hosts_and_external_url(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FLEETPILOT_WEBHOOK_ALLOWED_HOSTS", '["hooks.example.com", "*.corp.example"]')
    settings = ServerSettings(port=9000)
    assert settings.webhook_allowed_hosts == ["hooks.example.com", "*.corp.example"]
    assert settings.external_url == "http://127.0.0.1:9000"
    assert ServerSettings(alert_external_url="https://fleet.example.com").external_url == "https://fleet.example.com"

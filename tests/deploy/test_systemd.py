"""The systemd units of ``deploy/systemd/``: ``systemd-analyze verify`` where it is installed (on copies whose paths
point at this checkout's ``fleetpilot`` and the example environment files, since verify wants them to exist), and
always a parse: required keys, the commands parse with the real CLI, the environment files name real settings."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from fleetpilot.cli import build_parser
from fleetpilot.settings import ServerSettings
from inference_agent.settings import AgentSettings
from tests.support.availability import unavailable

SYSTEMD = Path(__file__).resolve().parents[2] / "deploy" / "systemd"
INSTALLED = "/opt/fleetpilot/bin/fleetpilot"
UNITS = {"fleetpilot-server.service": "server.env.example", "fleetpilot-agent.service": "agent.env.example"}
SETTING_NAMES = {
    "fleetpilot-server.service": set(ServerSettings.model_fields),
    "fleetpilot-agent.service": set(AgentSettings.model_fields),
}


def parse_unit(text: str) -> dict[str, dict[str, list[str]]]:
    """Sections → key → values (systemd allows a key more than once), comments and blank lines skipped."""
    sections: dict[str, dict[str, list[str]]] = {}
    current: dict[str, list[str]] | None = None
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("[") and line.endswith("]"):
            current = sections.setdefault(line[1:-1], {})
            continue
        assert current is not None and "=" in line, f"line {number}: {raw!r}"
        key, value = line.split("=", 1)
        current.setdefault(key.strip(), []).append(value.strip())
    return sections


def parse_env(text: str) -> dict[str, str]:
    return dict(
        line.split("=", 1) for line in (raw.strip() for raw in text.splitlines()) if line and not line.startswith("#")
    )


@pytest.mark.parametrize("unit", sorted(UNITS))
def test_each_unit_has_what_a_service_needs(unit: str) -> None:
    sections = parse_unit((SYSTEMD / unit).read_text())
    assert set(sections) == {"Unit", "Service", "Install"}
    service = sections["Service"]
    assert service["EnvironmentFile"] == [f"/etc/fleetpilot/{UNITS[unit].removesuffix('.example')}"]
    assert service["Restart"][0] in {"always", "on-failure"}
    assert service["KillSignal"] == ["SIGTERM"]
    assert sections["Install"]["WantedBy"] == ["multi-user.target"]
    assert "network-online.target" in sections["Unit"]["After"][0]


@pytest.mark.parametrize("unit", sorted(UNITS))
def test_each_command_parses_with_the_real_cli(unit: str) -> None:
    service = parse_unit((SYSTEMD / unit).read_text())["Service"]
    parser = build_parser()
    for command in [*service.get("ExecStartPre", []), *service["ExecStart"]]:
        binary, *argv = command.split()
        assert binary == INSTALLED
        assert parser.parse_args(argv).handler is not None


@pytest.mark.parametrize("unit", sorted(UNITS))
def test_each_environment_file_names_real_settings(unit: str) -> None:
    env = parse_env((SYSTEMD / UNITS[unit]).read_text())
    names = {k.removeprefix("FLEETPILOT_").lower() for k in env if k.startswith("FLEETPILOT_")}
    assert names and names <= SETTING_NAMES[unit]


def test_the_agent_token_is_a_credential_file_not_an_environment_variable() -> None:
    env = parse_env((SYSTEMD / "agent.env.example").read_text())
    assert not {"FLEETPILOT_TOKEN", "FLEETPILOT_TOKEN_FILE"} & set(env)
    assert "0.0.0.0" not in env.values()
    service = parse_unit((SYSTEMD / "fleetpilot-agent.service").read_text())["Service"]
    assert service["LoadCredential"] == ["agent-token:/etc/fleetpilot/agent-token"]
    assert service["Environment"] == ["FLEETPILOT_TOKEN_FILE=%d/agent-token"]


def test_the_server_example_is_a_valid_production_configuration() -> None:
    env = parse_env((SYSTEMD / "server.env.example").read_text())
    flags: dict[str, Any] = {k.removeprefix("FLEETPILOT_").lower(): v for k, v in env.items()}
    settings = ServerSettings(**flags)
    assert settings.environment.value == "production" and settings.database_url.startswith("postgresql+psycopg://")


def test_systemd_analyze_verify_accepts_both_units(tmp_path: Path) -> None:
    if shutil.which("systemd-analyze") is None:
        unavailable("systemd-analyze is not installed (Debian package systemd); the parse tests above still ran")
    fleetpilot = shutil.which("fleetpilot") or str(Path(__file__).resolve().parents[2] / ".venv/bin/fleetpilot")
    for unit, env_file in UNITS.items():
        text = (SYSTEMD / unit).read_text().replace(INSTALLED, fleetpilot)
        text = text.replace("/etc/fleetpilot/", f"{tmp_path}/")
        (tmp_path / unit).write_text(text)
        shutil.copy(SYSTEMD / env_file, tmp_path / env_file.removesuffix(".example"))
    result = subprocess.run(
        ["systemd-analyze", "verify", "--man=no", *(str(tmp_path / unit) for unit in UNITS)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    # verify warns (exit 0) about unknown keys: any line naming one of our files is a failure
    complaints = [line for line in (result.stdout + result.stderr).splitlines() if "fleetpilot-" in line]
    assert result.returncode == 0 and not complaints, result.stdout + result.stderr

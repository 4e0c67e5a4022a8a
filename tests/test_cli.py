"""The command line: subcommands that exist, token creation, migrations, clean errors."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from collector.database import make_engine
from fleetpilot.cli import main
from web.tokens import Role, TokenStore


def run(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "fleetpilot", *args], cwd=cwd, capture_output=True, text=True, timeout=120, check=False
    )


def test_help_lists_every_contract_command(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["--help"])
    assert exited.value.code == 0
    out = capsys.readouterr().out
    for command in ("server", "agent", "demo", "db", "token", "backtest", "simulate"):
        assert command in out


@pytest.mark.slow
def test_token_create_prints_the_token_alone_on_the_last_line(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/cli.db"
    upgraded = run("db", "upgrade", "--database-url", url, cwd=tmp_path)
    assert upgraded.returncode == 0, upgraded.stderr
    created = run("token", "create", "--role", "agent", "--node", "node-a", "--database-url", url, cwd=tmp_path)
    assert created.returncode == 0, created.stderr
    clear = created.stdout.strip().splitlines()[-1]
    engine = make_engine(url)
    info = TokenStore(engine).verify(clear, now=0.0)
    engine.dispose()
    assert info is not None
    assert (info.role, info.node_id) == (Role.AGENT, "node-a")


@pytest.mark.slow
def test_token_create_on_a_fresh_database_says_nothing_of_its_migration(tmp_path: Path) -> None:
    """The migration a first ``token create`` runs on SQLite is incidental: Alembic's INFO lines ("Context impl
    SQLiteImpl.", "Running upgrade  -> 0001 ...") came before the command's own two lines (issue 39)."""
    created = run("token", "create", "--role", "viewer", "--database-url", f"sqlite:///{tmp_path}/new.db", cwd=tmp_path)
    assert created.returncode == 0, created.stderr
    assert "alembic" not in created.stderr and "INFO" not in created.stderr, created.stderr
    lines = created.stdout.strip().splitlines()
    assert len(lines) == 2 and lines[-1].startswith("fp_"), created.stdout


def test_agent_token_without_node_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["token", "create", "--role", "agent", "--database-url", f"sqlite:///{tmp_path}/x.db"])
    assert code == 2
    assert "--node" in capsys.readouterr().err


def test_invalid_settings_are_reported_without_a_traceback(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["server", "--port", "70000"]) == 2
    err = capsys.readouterr().err
    assert "port" in err
    assert "Traceback" not in err


def test_a_bad_trusted_gateway_is_refused_before_the_agent_starts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "token").write_text("fp_agent-token-of-node-a\n")
    token = ["--token-file", str(tmp_path / "token")]
    agent = ["agent", "--collector", "http://127.0.0.1:9", *token, "--gpu-probe", "none"]
    gateway = ["--serve-tenant-header", "X-Tenant", "--serve-trusted-gateway", "10.0.0.0/33"]
    assert main([*agent, *gateway]) == 2
    assert "10.0.0.0/33" in capsys.readouterr().err

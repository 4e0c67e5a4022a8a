"""Issue 19, part 5: no token on a command line (``ps`` shows every process's arguments to every user). ``--token``
is refused by name wherever a command takes a token, the processes fleetpilot starts carry theirs in the
environment, and ``--token-file`` or ``FLEETPILOT_TOKEN`` is the way in."""

from __future__ import annotations

from pathlib import Path

import pytest

from fleetpilot.cli import main
from fleetpilot.launch import AgentProcess
from fleetpilot.token_flags import ON_COMMAND_LINE, tenant_keys_from, token_from

TOKEN = "fp_agent_0123456789abcdef0123456789"


@pytest.mark.parametrize(
    "argv",
    [
        ["agent", "--collector", "http://127.0.0.1:9", "--token", TOKEN],
        ["agent", "--collector", "http://127.0.0.1:9", f"--token={TOKEN}"],
        ["replay", "data/traces/none.csv", "--server", "http://127.0.0.1:9", "--token", TOKEN],
    ],
    ids=["agent", "agent-equals", "replay"],
)
def test_a_token_flag_is_refused_by_name(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(argv)
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert ON_COMMAND_LINE in err
    assert TOKEN not in err


def test_an_abbreviation_of_token_file_is_no_way_around_it(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["agent", "--collector", "http://127.0.0.1:9", "--tok", TOKEN])
    assert "ambiguous option: --tok" in capsys.readouterr().err


def test_a_token_comes_from_its_file_or_the_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "token"
    path.write_text(TOKEN + "\n")
    monkeypatch.setenv("FLEETPILOT_TOKEN", "from-the-environment")
    assert token_from(str(path)) == TOKEN
    assert token_from(None) == "from-the-environment"
    with pytest.raises(ValueError, match=r"--token-file '.*missing': cannot read it"):
        token_from(str(tmp_path / "missing"))


def test_a_running_agent_started_as_the_demo_starts_it_shows_no_token_in_its_cmdline(tmp_path: Path) -> None:
    agent = AgentProcess(
        collector="http://127.0.0.1:9", token=TOKEN, node_id="n1", spool_dir=tmp_path / "spool", gpu_probe="none"
    )
    with agent:
        agent.wait_ready()  # the agent runs, with the token it read from FLEETPILOT_TOKEN
        assert agent.process is not None
        cmdline = Path(f"/proc/{agent.process.pid}/cmdline").read_bytes()
        environ = Path(f"/proc/{agent.process.pid}/environ").read_bytes()
    assert b"agent" in cmdline
    assert TOKEN.encode() not in cmdline
    assert b"--token" not in cmdline
    assert f"FLEETPILOT_TOKEN={TOKEN}".encode() in environ.split(b"\0")  # readable by its own user only


TENANT_KEY = "fp_tenant_0123456789abcdefghijklmnopqrstuvwxyzABCDEFG"


def test_a_tenant_key_on_the_replay_command_line_is_refused_and_says_what_to_use(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Issue 35, low: ``--tenant-key NAME=KEY`` put a tenant's key where ``ps`` shows it."""
    argv = ["replay", "data/traces/none.csv", "--server", "http://127.0.0.1:9", "--tenant-key", f"acme={TENANT_KEY}"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "--tenant-key acme: a key on the command line is shown by ps" in err
    assert "acme=@PATH" in err and "FLEETPILOT_TENANT_KEYS" in err
    assert TENANT_KEY not in err


def test_tenant_keys_come_from_files_or_the_environment(tmp_path: Path) -> None:
    path = tmp_path / "acme.key"
    path.write_text(TENANT_KEY + "\n")
    environ = {"FLEETPILOT_TENANT_KEYS": "over=fp_tenant_o, busy=fp_tenant_b"}
    keys = tenant_keys_from([f"acme=@{path}"], environ)
    assert keys == {"over": "fp_tenant_o", "busy": "fp_tenant_b", "acme": TENANT_KEY}
    with pytest.raises(ValueError, match="FLEETPILOT_TENANT_KEYS: 'nokey' is not NAME=KEY"):
        tenant_keys_from([], {"FLEETPILOT_TENANT_KEYS": "nokey"})

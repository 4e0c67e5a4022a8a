"""Issue 15, finding 15 (agent side): an agent token on the command line is visible to every user in `ps`. The agent
reads it from FLEETPILOT_TOKEN or a file; the processes fleetpilot starts itself never put it in their arguments."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from fleetpilot.launch import AgentProcess
from inference_agent.settings import AgentSettings

TOKEN = "fp_agent_0123456789abcdef0123456789"


def test_the_token_file_fills_the_token_from_a_flag_or_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "agent-token"
    path.write_text(TOKEN + "\n")  # as `echo` and Kubernetes Secrets leave it
    assert AgentSettings(collector="http://127.0.0.1:1", token_file=path).token == TOKEN
    monkeypatch.setenv("FLEETPILOT_TOKEN_FILE", str(path))
    assert AgentSettings(collector="http://127.0.0.1:1").token == TOKEN


def test_a_token_and_a_token_file_together_or_an_unreadable_file_are_refused_by_name(tmp_path: Path) -> None:
    path = tmp_path / "agent-token"
    path.write_text(TOKEN)
    with pytest.raises(ValidationError, match="token and token_file"):
        AgentSettings(collector="http://127.0.0.1:1", token=TOKEN, token_file=path)
    with pytest.raises(ValidationError, match=r"token_file .*missing.*cannot read it"):
        AgentSettings(collector="http://127.0.0.1:1", token_file=tmp_path / "missing")


def test_agents_started_by_fleetpilot_carry_the_token_in_their_environment_not_their_arguments(
    tmp_path: Path,
) -> None:
    agent = AgentProcess(collector="http://127.0.0.1:1", token=TOKEN, node_id="n1", spool_dir=tmp_path)
    assert not any(TOKEN in part for part in agent.command())
    assert "--token" not in agent.command()
    assert agent.child_env()["FLEETPILOT_TOKEN"] == TOKEN

"""inference_agent.ports: a port handed out is free, and no two callers on the host are given the same one."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import pytest

from inference_agent import ports
from inference_agent.ports import free_port

ROOT = Path(__file__).resolve().parents[2]


def test_a_port_is_not_handed_out_twice_while_claimed(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The kernel gives a port just closed to the next asker; the claim makes the second caller take another."""
    monkeypatch.setattr(ports, "PORT_CLAIMS", tmp_path / "claims")
    offered = iter([41000, 41000, 41000, 41001])
    monkeypatch.setattr(ports, "_unbound_port", lambda _host: next(offered))
    assert [free_port(), free_port()] == [41000, 41001]


def test_no_two_callers_are_given_the_same_port() -> None:
    """Four processes asking at once, as four test workers do: every port handed out is different."""
    script = "from inference_agent.ports import free_port\nprint(' '.join(str(free_port()) for _ in range(150)))"
    workers = [
        subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True, cwd=ROOT) for _ in range(4)
    ]
    ports = [int(port) for worker in workers for port in worker.communicate(timeout=120)[0].split()]
    assert len(ports) == 600
    assert len(set(ports)) == len(ports)


def test_a_port_handed_out_is_free() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", free_port()))

"""Starting replica processes: the narrow ``Launcher`` Protocol the supervisor uses, and the real one.

A built-in replica runs ``python -m inference_agent.serving.replica``; an engine profile's replica runs the command
the node's config declares, rendered for it (``LaunchSpec.command``). Each runs in its own session (a Ctrl-C at the
terminal reaches the agent, which drains the replicas in order, not the replicas directly), with its output in
``LOG_DIR/ID.log``.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from inference_agent.http_server import ConnectionLimits


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        port: int = s.getsockname()[1]
        return port


@dataclass(frozen=True)
class LaunchSpec:
    replica_id: str
    pool: str
    kind: str
    port: int
    env: dict[str, str] = field(default_factory=dict)
    command: tuple[str, ...] | None = None  # an engine profile's argv; None: the built-in replica


class ReplicaProcess(Protocol):
    @property
    def pid(self) -> int: ...

    def poll(self) -> int | None: ...

    def terminate(self) -> None: ...

    def kill(self) -> None: ...


class Launcher(Protocol):
    def launch(self, spec: LaunchSpec) -> ReplicaProcess: ...

    def log_tail(self, replica_id: str, lines: int = 20) -> str: ...


@dataclass(frozen=True)
class ProcessLauncher:
    """Replica processes of ``engine`` (torch or fake) on ``device``; ``drain_timeout_s`` is what SIGTERM waits, and
    ``http`` bounds each replica's HTTP server."""

    log_dir: Path
    engine: str = "torch"
    device: str = "cpu"
    seed: int = 0
    drain_timeout_s: float = 5.0
    http: ConnectionLimits = field(default_factory=ConnectionLimits)
    extra_args: tuple[str, ...] = ()

    def launch(self, spec: LaunchSpec) -> ReplicaProcess:
        self.log_dir.mkdir(parents=True, exist_ok=True)
        command = list(spec.command) if spec.command is not None else self._builtin(spec)
        with (self.log_dir / f"{spec.replica_id}.log").open("ab") as log:
            log.write(f"--- {' '.join(command)}\n".encode())
            log.flush()
            return subprocess.Popen(
                command,
                stdout=log,
                stderr=subprocess.STDOUT,
                env={**os.environ, **spec.env},
                start_new_session=True,
            )

    def _builtin(self, spec: LaunchSpec) -> list[str]:
        return [
            sys.executable,
            "-m",
            "inference_agent.serving.replica",
            *("--pool", spec.pool, "--kind", spec.kind, "--port", str(spec.port)),
            *("--engine", self.engine, "--device", self.device, "--seed", str(self.seed)),
            *("--drain-timeout-s", str(self.drain_timeout_s)),
            *("--http-max-connections", str(self.http.max_connections)),
            *("--http-socket-timeout-s", str(self.http.socket_timeout_s)),
            *("--http-head-timeout-s", str(self.http.head_timeout_s)),
            *("--http-max-body-bytes", str(self.http.max_body_bytes)),
            *self.extra_args,
        ]

    def log_tail(self, replica_id: str, lines: int = 20) -> str:
        try:
            text = (self.log_dir / f"{replica_id}.log").read_text(errors="replace")
        except OSError:
            return "(no log)"
        return "\n".join(text.splitlines()[-lines:])

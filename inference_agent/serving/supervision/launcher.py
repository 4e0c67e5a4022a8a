"""Starting replica processes: the narrow ``Launcher`` Protocol the supervisor uses, and the real one.

A built-in replica runs ``python -m inference_agent.serving.replica``; an engine profile's replica runs the command
the node's config declares, rendered for it (``LaunchSpec.command``). Each runs in its own session (a Ctrl-C at the
terminal reaches the agent, which drains the replicas in order, not the replicas directly), with its output in
``LOG_DIR/ID.log``, and with an explicit environment (``replica_environment_of``): what an engine needs from the
agent's (``PATH``, ``PYTHONPATH``, ``HOME``, locale, CUDA, NVIDIA and Hugging Face variables), then the replica's own
(its quota, its GPUs, its key, the profile's declared ``env``) — never the agent's token, its token file or anything
else.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from inference_agent.http_server import ConnectionLimits

# PYTHONPATH too: a built-in replica (and a `{python}` profile) runs the agent's own interpreter and code, and must
# import what the agent imports (an agent installed with `pip install --target` and PYTHONPATH); it holds no secret
PASSED_ENV = frozenset(
    {"PATH", "PYTHONPATH", "HOME", "USER", "LOGNAME", "LANG", "LANGUAGE", "TZ", "TMPDIR", "LD_LIBRARY_PATH"}
)
PASSED_ENV_PREFIXES = ("LC_", "CUDA_", "NVIDIA_", "HF_")  # locale; the CUDA/MPS pipes and devices; model caches


def replica_environment_of(agent_env: Mapping[str, str], own: Mapping[str, str]) -> dict[str, str]:
    """A replica's whole environment: the agent's variables an engine needs, then the replica's ``own``."""
    passed = {
        name: value for name, value in agent_env.items() if name in PASSED_ENV or name.startswith(PASSED_ENV_PREFIXES)
    }
    return {**passed, **own}


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
                env=replica_environment_of(os.environ, spec.env),
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

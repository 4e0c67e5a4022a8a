"""A private NVIDIA MPS control daemon for the GPU benchmarks (``bench.mps``, ``bench.isolation --device cuda``).

``nvidia-cuda-mps-control -d`` started with its own pipe and log directories under /tmp (the pipe directory holds
Unix sockets, whose paths must stay under 108 bytes), so a daemon the machine already runs is left alone; ``quit``
and removed on exit, its logs kept in ``final_logs``. An agent or client with ``env`` in its environment joins it
(the agent's ``mps_daemon_running`` looks for ``$CUDA_MPS_PIPE_DIRECTORY/control``).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from inference_agent.isolation.mps import CONTROL_BINARY


class MpsUnavailable(Exception):
    """The MPS control daemon cannot run here; the message says exactly what failed."""


@dataclass
class PrivateMpsDaemon:
    """A control daemon started with its own pipe and log directories under ``base``."""

    binary: str
    base: Path
    final_logs: str = "(the daemon was not quit yet)"  # its logs as they were when it quit

    @property
    def env(self) -> dict[str, str]:
        """What a client (or the agent) needs in its environment to reach this daemon."""
        return {"CUDA_MPS_PIPE_DIRECTORY": str(self.base / "pipe"), "CUDA_MPS_LOG_DIRECTORY": str(self.base / "log")}

    def command(self, line: str) -> str:
        done = subprocess.run(
            [self.binary], input=f"{line}\n", capture_output=True, text=True, env={**os.environ, **self.env},
            timeout=30, check=False,
        )  # fmt: skip
        return (done.stdout + done.stderr).strip()

    def logs(self) -> str:
        parts = [f"== {p.name}\n{p.read_text(errors='replace')}" for p in sorted((self.base / "log").glob("*.log"))]
        return "\n".join(parts) or "(the daemon wrote no log)"


@contextmanager
def private_mps_daemon(binary: str | None = None) -> Iterator[PrivateMpsDaemon]:
    """Start ``nvidia-cuda-mps-control -d`` privately; ``quit`` it and remove its directories on exit."""
    found = binary or shutil.which(CONTROL_BINARY)
    if found is None:
        raise MpsUnavailable(f"no {CONTROL_BINARY} on PATH (the NVIDIA driver's MPS is not installed)")
    daemon = PrivateMpsDaemon(found, Path(tempfile.mkdtemp(prefix="mps-", dir="/tmp")))  # sockets: short paths
    for name in ("pipe", "log"):
        (daemon.base / name).mkdir()
    try:
        done = subprocess.run(
            [found, "-d"], capture_output=True, text=True, env={**os.environ, **daemon.env}, timeout=30, check=False
        )
        control = daemon.base / "pipe" / "control"
        deadline = time.monotonic() + 5.0
        while done.returncode == 0 and not control.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        if done.returncode != 0 or not control.exists():
            said = (done.stdout + done.stderr).strip() or "nothing"
            raise MpsUnavailable(
                f"{found} -d exited {done.returncode} and said {said!r}; control pipe "
                f"{'present' if control.exists() else 'missing'}; its logs: {daemon.logs()[:800]}"
            )
        yield daemon
    finally:
        if (daemon.base / "pipe" / "control").exists():
            daemon.command("quit")
        daemon.final_logs = daemon.logs()
        shutil.rmtree(daemon.base, ignore_errors=True)

"""Real ``fleetpilot server`` and ``fleetpilot agent`` processes, started and awaited: for the demo, benchmarks and
tests. Each writes its output to a log file, is ready once its health URL answers 200, and is always reaped."""

from __future__ import annotations

import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Self

import httpx

from inference_agent.ports import free_port

FLEETPILOT = (sys.executable, "-m", "fleetpilot")
# util-linux's setpriv asks Linux to SIGTERM the child when its parent dies, then execs the command: no Python runs
# between fork and exec, so subprocess may vfork (a preexec_fn forces a plain fork, whose child runs the atfork
# handlers of every library loaded, gRPC's among them: they aborted 1 child in 40 with "epoll_wait error: Bad file
# descriptor" once the parent had used gRPC, which killed the server of a browser test in CI)
SETPRIV = shutil.which("setpriv") if sys.platform.startswith("linux") else None


def dying_with_parent(command: Sequence[str]) -> list[str]:
    """``command`` run so that it gets SIGTERM when the parent dies, so a killed benchmark, test run or demo never
    leaves servers and agents behind (elsewhere the context managers still stop them on a normal exit). Linux ties
    this to the thread that started the child: start children from a thread that outlives them."""
    return [SETPRIV, "--pdeathsig", "TERM", "--", *command] if SETPRIV is not None else list(command)


def _temp_log(prefix: str) -> Path:
    handle, name = tempfile.mkstemp(prefix=prefix, suffix=".log")
    os.close(handle)
    return Path(name)


@dataclass(kw_only=True)
class ChildProcess:
    """A child process with a log file and a health URL; subclasses give its ``command()`` and ``ready_url()``."""

    env: dict[str, str] = field(default_factory=dict)
    ready_timeout_s: float = 60.0
    log_path: Path = field(default_factory=lambda: _temp_log("fleetpilot-"))
    cwd: Path | None = None
    process: subprocess.Popen[bytes] | None = None

    @property
    def name(self) -> str:
        return Path(self.command()[0]).name

    def command(self) -> list[str]:
        raise NotImplementedError

    def ready_url(self) -> str:
        raise NotImplementedError

    def child_env(self) -> dict[str, str]:
        return {**os.environ, **self.env}

    def start(self) -> Self:
        with self.log_path.open("ab") as log:
            self.process = subprocess.Popen(
                dying_with_parent(self.command()),
                stdout=log,
                stderr=subprocess.STDOUT,
                env=self.child_env(),
                cwd=self.cwd,
            )
        try:
            self.wait_ready()
        except BaseException:
            self.stop()
            raise
        return self

    def wait_ready(self) -> None:
        deadline = time.monotonic() + self.ready_timeout_s
        while time.monotonic() < deadline:
            if self.process is not None and self.process.poll() is not None:
                raise RuntimeError(f"{self.name} exited with {self.process.returncode}:\n{self.log_tail()}")
            try:
                if httpx.get(self.ready_url(), timeout=1.0).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        raise TimeoutError(f"{self.name} not ready within {self.ready_timeout_s} s:\n{self.log_tail()}")

    def stop(self, sig: signal.Signals = signal.SIGTERM, timeout_s: float = 15.0) -> int | None:
        """Signal the process and reap it (SIGKILL after ``timeout_s``); its exit code, None if never started."""
        if self.process is None or self.process.poll() is not None:
            return None if self.process is None else self.process.returncode
        self.process.send_signal(sig)
        try:
            return self.process.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.process.kill()
            return self.process.wait(timeout_s)

    def kill(self) -> None:
        self.stop(signal.SIGKILL)

    def log_tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *_exc: type[BaseException] | BaseException | TracebackType | None) -> None:
        self.stop()


@dataclass
class ServerProcess(ChildProcess):
    """``with ServerProcess(database_url) as server:`` runs a server on loopback with a known admin token."""

    database_url: str
    port: int = field(default_factory=free_port)
    admin_token: str = field(default_factory=lambda: f"fp_admin_{secrets.token_urlsafe(32)}")
    # ``--workers``: one process by default, whose pid is the one holding the leases (what the fault tests kill and
    # look for); None: the server's own default
    workers: int | None = 1

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def name(self) -> str:
        return "fleetpilot server"

    def command(self) -> list[str]:
        flags = {"--host": "127.0.0.1", "--port": str(self.port), "--database-url": self.database_url}
        if self.workers is not None:
            flags["--workers"] = str(self.workers)
        return [*FLEETPILOT, "server", *(part for pair in flags.items() for part in pair)]

    def ready_url(self) -> str:
        return f"{self.url}/readyz"

    def child_env(self) -> dict[str, str]:
        return {**super().child_env(), "FLEETPILOT_ADMIN_TOKEN": self.admin_token}

    def create_agent_token(self, node_id: str) -> str:
        """A new agent token for ``node_id`` through the REST API, as an operator would create it."""
        return self.create_token("agent", node_id)

    def create_token(self, role: str, node_id: str | None = None) -> str:
        """A new token of ``role`` (``node_id``: an agent's node) through the REST API."""
        response = httpx.post(
            f"{self.url}/api/v1/tokens",
            json={"role": role, "node_id": node_id} if node_id else {"role": role},
            headers={"Authorization": f"Bearer {self.admin_token}"},
            timeout=10.0,
        )
        response.raise_for_status()
        token: str = response.json()["token"]
        return token


@dataclass(kw_only=True)
class AgentProcess(ChildProcess):
    """One node agent pushing to ``collector``, with its own spool folder and ``/metrics`` port."""

    collector: str
    token: str
    node_id: str
    spool_dir: Path
    gpu_probe: str = "auto"
    metrics_port: int = field(default_factory=free_port)
    workload: str = "none"
    pools: str | None = None  # with the builtin workload: "NAME=text|classify:REPLICAS,..."
    serve_port: int | None = None
    config: Path | None = None  # the node's config file: labels, engine profiles, engines it reads

    @property
    def metrics_url(self) -> str:
        return f"http://127.0.0.1:{self.metrics_port}"

    @property
    def name(self) -> str:
        return f"fleetpilot agent {self.node_id}"

    def command(self) -> list[str]:
        flags = {
            "--collector": self.collector,
            "--node-id": self.node_id,
            "--gpu-probe": self.gpu_probe,
            "--spool-dir": str(self.spool_dir),
            "--metrics-port": str(self.metrics_port),
            "--workload": self.workload,
        }
        if self.pools is not None:
            flags["--pools"] = self.pools
        if self.serve_port is not None:
            flags["--serve-port"] = str(self.serve_port)
        if self.config is not None:
            flags["--config"] = str(self.config)
        return [*FLEETPILOT, "agent", *(part for pair in flags.items() for part in pair)]

    def child_env(self) -> dict[str, str]:
        """The token travels in the environment: on the command line every user of the machine sees it in `ps`."""
        return {**super().child_env(), "FLEETPILOT_TOKEN": self.token}

    @property
    def serve_url(self) -> str | None:
        return None if self.serve_port is None else f"http://127.0.0.1:{self.serve_port}"

    def ready_url(self) -> str:
        return f"{self.metrics_url}/healthz"

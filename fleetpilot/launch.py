"""Start a real ``fleetpilot server`` process and wait until it is ready: for the demo, benchmarks and tests."""

from __future__ import annotations

import os
import secrets
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType

import httpx


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _temp_log(prefix: str) -> Path:
    handle, name = tempfile.mkstemp(prefix=prefix, suffix=".log")
    os.close(handle)
    return Path(name)


@dataclass
class ServerProcess:
    """``with ServerProcess(database_url) as server:`` runs a server on loopback with a known admin token.

    The server's output goes to ``log_path``; ``stop()`` sends SIGTERM (``kill()`` SIGKILL) and the context exit
    always reaps the process.
    """

    database_url: str
    port: int = field(default_factory=free_port)
    admin_token: str = field(default_factory=lambda: f"fp_admin_{secrets.token_urlsafe(32)}")
    env: dict[str, str] = field(default_factory=dict)
    ready_timeout_s: float = 60.0
    log_path: Path = field(default_factory=lambda: _temp_log("fleetpilot-server-"))
    process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> ServerProcess:
        env = {**os.environ, **self.env, "FLEETPILOT_ADMIN_TOKEN": self.admin_token}
        command = [
            sys.executable,
            "-m",
            "fleetpilot",
            "server",
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--database-url",
            self.database_url,
        ]
        with self.log_path.open("ab") as log:
            self.process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env)
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
                raise RuntimeError(f"server exited with {self.process.returncode}:\n{self.log_tail()}")
            try:
                if httpx.get(f"{self.url}/readyz", timeout=1.0).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        raise TimeoutError(f"server not ready within {self.ready_timeout_s} s:\n{self.log_tail()}")

    def stop(self, sig: signal.Signals = signal.SIGTERM, timeout_s: float = 15.0) -> int | None:
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

    def __enter__(self) -> ServerProcess:
        return self.start()

    def __exit__(self, *_exc: type[BaseException] | BaseException | TracebackType | None) -> None:
        self.stop()

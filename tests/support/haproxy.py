"""A real HAProxy (Debian ``haproxy``) on loopback in front of some servers, as a load balancer in production is.

Round robin, health-checked on ``/readyz`` every 200 ms (a server down after two failed checks), and a request
whose connection was refused goes to another server (``option redispatch``: HAProxy retries only what it never
sent, so a POST is never sent twice).
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from pathlib import Path
from types import TracebackType

from inference_agent.ports import free_port
from tests.support.availability import unavailable

CONFIG = """\
global
    maxconn 2048
defaults
    mode http
    timeout connect 2s
    timeout client 30s
    timeout server 30s
    retries 3
    option redispatch
frontend fleetpilot
    bind 127.0.0.1:{port}
    default_backend servers
backend servers
    balance roundrobin
    option httpchk GET /readyz
    default-server inter 200ms fall 2 rise 1
{servers}
"""


class HAProxy:
    def __init__(self, backends: list[int], folder: Path) -> None:
        binary = shutil.which("haproxy") or ("/usr/sbin/haproxy" if Path("/usr/sbin/haproxy").exists() else None)
        if binary is None:
            unavailable("no haproxy on this machine (Debian package haproxy)")
        self.binary = str(binary)
        self.port = free_port()
        self.config = folder / "haproxy.cfg"
        servers = "\n".join(f"    server s{i} 127.0.0.1:{port} check" for i, port in enumerate(backends))
        self.config.write_text(CONFIG.format(port=self.port, servers=servers))
        self.log = folder / "haproxy.log"
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> HAProxy:
        check = subprocess.run([self.binary, "-c", "-f", str(self.config)], check=False, capture_output=True, text=True)
        assert check.returncode == 0, check.stdout + check.stderr
        with self.log.open("wb") as log:
            self.process = subprocess.Popen([self.binary, "-db", "-f", str(self.config)], stdout=log, stderr=log)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            assert self.process.poll() is None, self.log.read_text()
            with socket.socket() as probe:
                if probe.connect_ex(("127.0.0.1", self.port)) == 0:
                    return self
            time.sleep(0.05)
        raise TimeoutError(f"haproxy did not listen on {self.port}:\n{self.log.read_text()}")

    def __exit__(self, *_: type[BaseException] | BaseException | TracebackType | None) -> None:
        if self.process is not None:
            self.process.terminate()
            self.process.wait(10)

"""Ports for the processes we start on this host: the node's replicas, and the servers and agents of the demo,
benchmarks and tests."""

from __future__ import annotations

import fcntl
import os
import socket
import tempfile
import time
from pathlib import Path

PORT_CLAIMS = Path(tempfile.gettempdir()) / f"fleetpilot-port-claims-{os.getuid()}"  # one file per user: theirs to lock
PORT_CLAIM_SECONDS = 60.0  # by then the process it was handed to listens on it, or has exited


def free_port(host: str = "127.0.0.1") -> int:
    """A port on ``host`` free now and claimed for a minute against every other caller on this machine (the replicas
    of this node, parallel test workers, a benchmark beside a test run): the kernel hands out a port just closed
    again, so without the claim two processes asking at once could both be told the same one."""
    try:
        claims_file = PORT_CLAIMS.open("a+")
    except OSError:  # a temporary folder we cannot write: the kernel's word alone
        return _unbound_port(host)
    with claims_file as claims:
        fcntl.flock(claims, fcntl.LOCK_EX)  # released when the file closes
        claims.seek(0)
        now = time.time()
        held = {
            int(port): float(at)
            for port, at in (line.split() for line in claims.read().splitlines() if line.strip())
            if now - float(at) < PORT_CLAIM_SECONDS
        }
        while (port := _unbound_port(host)) in held:
            pass
        held[port] = now
        claims.seek(0)
        claims.truncate()
        claims.write("".join(f"{p} {at}\n" for p, at in held.items()))
        return port


def _unbound_port(host: str) -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        port: int = s.getsockname()[1]
        return port

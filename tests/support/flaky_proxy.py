"""A TCP proxy on loopback that makes the network between an agent and the collector bad: every chunk is delayed,
some connections are reset as they open, and some are cut mid-stream (a request half sent, or an answer lost after
the collector committed it: the case that makes an agent resend what is already stored).

Lost packets on a real link show up to TCP's users as delay (retransmits) and, when the loss persists, as a reset
connection; the proxy makes both at the socket level, so the agent's real HTTP client meets them. No root or network
namespace is needed. ``calm()`` lifts the faults so a test can watch the backlog drain.
"""

from __future__ import annotations

import contextlib
import random
import socket
import struct
import threading
import time
from dataclasses import dataclass, field
from types import TracebackType
from typing import Self

from inference_agent.ports import free_port

CHUNK_BYTES = 16 * 1024


@dataclass(frozen=True)
class Faults:
    delay_s: float = 0.05  # added to every chunk, each direction
    jitter_s: float = 0.05  # plus a uniform 0..jitter_s
    reset_on_connect: float = 0.2  # share of new connections reset at once
    cut_per_chunk: float = 0.1  # share of chunks that, instead of passing, cut their connection


NO_FAULTS = Faults(0.0, 0.0, 0.0, 0.0)


@dataclass
class FaultCounts:
    connections: int = 0
    resets: int = 0
    cuts: int = 0


def _reset(sock: socket.socket) -> None:
    """Close with RST (SO_LINGER 0), as a peer or middlebox that gave up does; never raises."""
    with contextlib.suppress(OSError):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    sock.close()


@dataclass
class FlakyProxy:
    """``with FlakyProxy(target_port, Faults(...)) as proxy:`` forwards ``proxy.url`` to 127.0.0.1:target_port."""

    target_port: int
    faults: Faults = field(default_factory=Faults)
    seed: int = 0
    port: int = field(default_factory=free_port)
    counts: FaultCounts = field(default_factory=FaultCounts)

    def __post_init__(self) -> None:
        self._rng = random.Random(self.seed)
        self._lock = threading.Lock()
        self._closed = threading.Event()
        self._listener = socket.create_server(("127.0.0.1", self.port))
        self._listener.settimeout(0.2)
        self._thread = threading.Thread(target=self._accept_loop, name="flaky-proxy", daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def calm(self) -> None:
        """From now on, forward everything at once and cut nothing."""
        self.faults = NO_FAULTS

    def _chance(self, share: float) -> bool:
        with self._lock:
            return self._rng.random() < share

    def _accept_loop(self) -> None:
        while not self._closed.is_set():
            try:
                client, _address = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            self.counts.connections += 1
            if self._chance(self.faults.reset_on_connect):
                self.counts.resets += 1
                _reset(client)
                continue
            threading.Thread(target=self._connect, args=(client,), daemon=True).start()

    def _connect(self, client: socket.socket) -> None:
        try:
            upstream = socket.create_connection(("127.0.0.1", self.target_port), timeout=5)
        except OSError:
            _reset(client)  # the collector is down: the agent sees its connection fail, as it would directly
            return
        upstream.settimeout(None)
        for source, sink in ((client, upstream), (upstream, client)):
            threading.Thread(target=self._pump, args=(source, sink), daemon=True).start()

    def _pump(self, source: socket.socket, sink: socket.socket) -> None:
        """Copy one direction chunk by chunk, each after the delay; a cut resets both sockets."""
        try:
            while chunk := source.recv(CHUNK_BYTES):
                faults = self.faults
                time.sleep(faults.delay_s + (self._rng.uniform(0, faults.jitter_s) if faults.jitter_s else 0.0))
                if self._chance(faults.cut_per_chunk):
                    self.counts.cuts += 1
                    break
                sink.sendall(chunk)
            else:
                sink.shutdown(socket.SHUT_WR)  # a clean close passes on as one
                return
        except OSError:
            pass
        _reset(source)
        _reset(sink)

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, traceback: TracebackType | None
    ) -> None:
        self._closed.set()
        self._listener.close()
        self._thread.join(timeout=5)

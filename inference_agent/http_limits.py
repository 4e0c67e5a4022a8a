"""What bounds one connection to the agent's HTTP servers: its slot (counted per peer, a few kept for the node's own
address) and the deadline on reading a request (the whole head, then the body at a minimum rate).

A slow client that trickles a byte every 20 s is within any per-read timeout; what cuts it is a deadline for the
whole head, ``head_timeout_s`` from the moment the server starts waiting for it (10 s by default, the same budget
keeps an idle keep-alive connection). A peer holds at most ``max_connections_per_peer`` slots, so one address
cannot take all 256; and ``reserved_local`` slots are kept for the address the server listens on (with a hostNetwork
DaemonSet, the kubelet's probe comes from the node's own address), so no remote client can starve the probe.
"""

from __future__ import annotations

import ipaddress
import socket
import threading
import time
from collections import Counter
from enum import Enum

Network = ipaddress.IPv4Network | ipaddress.IPv6Network

MIN_BODY_BYTES_PER_S = 1024 * 1024  # a 16 MiB body gets 16 s on top of the head's budget: 1 MiB/s is a slow link


class Slot(Enum):
    GRANTED = "granted"
    SERVER_FULL = "server full"
    PEER_FULL = "peer full"


class PeerSlots:
    """Connection slots: ``total`` for anyone, at most ``per_peer`` for one address (but those inside ``unbounded``),
    and ``reserved_local`` more that only ``local_address`` may take once the others are full."""

    def __init__(
        self, total: int, per_peer: int, reserved_local: int, local_address: str, unbounded: tuple[Network, ...] = ()
    ) -> None:
        self._total, self._per_peer, self._reserved = total, per_peer, reserved_local
        self._local = {local_address} if local_address not in ("0.0.0.0", "::", "") else {"127.0.0.1", "::1"}
        self._unbounded = unbounded
        self._by_peer: Counter[str] = Counter()
        self._used = 0
        self._lock = threading.Lock()

    def take(self, peer: str) -> Slot:
        with self._lock:
            if self._by_peer[peer] >= self._per_peer and not self._is_unbounded(peer):
                return Slot.PEER_FULL
            limit = self._total + (self._reserved if peer in self._local else 0)
            if self._used >= limit:
                return Slot.SERVER_FULL
            self._used += 1
            self._by_peer[peer] += 1
            return Slot.GRANTED

    def _is_unbounded(self, peer: str) -> bool:
        try:
            address = ipaddress.ip_address(peer)
        except ValueError:
            return False
        return any(address in network for network in self._unbounded)

    def give_back(self, peer: str) -> None:
        with self._lock:
            self._used -= 1
            self._by_peer[peer] -= 1
            if self._by_peer[peer] <= 0:
                del self._by_peer[peer]


class DeadlineReader(socket.SocketIO):
    """A connection's reading side whose every read waits at most until ``deadline`` (monotonic seconds; None: the
    idle timeout per read), so that the time to read a whole head or body is bounded, not the time per byte."""

    def __init__(self, connection: socket.socket, idle_timeout_s: float | None) -> None:
        super().__init__(connection, "rb")
        connection._io_refs += 1  # type: ignore[attr-defined]  # as socket.makefile counts its files
        self._connection = connection
        self._idle_timeout_s = idle_timeout_s
        self.deadline: float | None = None

    def arm(self, budget_s: float) -> None:
        self.deadline = time.monotonic() + budget_s

    def disarm(self) -> None:
        """Back to the idle timeout per read (and per write: the socket's timeout is shared)."""
        self.deadline = None
        self._connection.settimeout(self._idle_timeout_s)

    def readinto(self, buffer: bytearray | memoryview) -> int | None:  # type: ignore[override]
        if self.deadline is not None:
            left = self.deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("the request was not read within its deadline")
            self._connection.settimeout(left if self._idle_timeout_s is None else min(left, self._idle_timeout_s))
        return super().readinto(buffer)


def body_budget_s(head_timeout_s: float, length: int) -> float:
    """How long a body of ``length`` bytes may take to arrive: 16 MiB with a 10 s head budget → 26 s."""
    return head_timeout_s + length / MIN_BODY_BYTES_PER_S

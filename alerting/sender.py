"""The HTTP POST behind webhook delivery, as a narrow Protocol: httpx for real, a scripted fake for tests.

A sender never raises for a failed delivery: it answers the status code, or a short fixed reason (``HTTP 500``, the
exception's class, a refused address's category), which the outbox records and retries. It never keeps what a target
answered nor an exception's message: the delivery log is read by viewers, and a target's answer or a connect error may
describe the network behind it.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Protocol

import httpx

from alerting.target_address import AddressPolicy, AddressRefused, CheckedTransport


@dataclass(frozen=True)
class SendResult:
    status_code: int | None  # None: no answer (connection refused, timeout)
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.status_code is not None and 200 <= self.status_code < 300


class Sender(Protocol):
    def post(self, url: str, body: bytes, headers: Mapping[str, str]) -> SendResult: ...

    def close(self) -> None: ...


class HttpxSender:
    """POSTs with one pooled ``httpx.Client`` over :class:`CheckedTransport`, so each new connection resolves the
    target and connects only to an address ``policy`` allows; redirects are not followed (a webhook answers where it
    is, and a redirect could point inside). ``transport`` replaces the network, the check included (tests)."""

    def __init__(
        self, *, timeout_seconds: float, policy: AddressPolicy, transport: httpx.BaseTransport | None = None
    ) -> None:
        self._client = httpx.Client(
            timeout=timeout_seconds,
            follow_redirects=False,
            trust_env=False,  # an HTTP(S)_PROXY from the environment would connect for us, unchecked
            transport=transport or CheckedTransport(policy),
        )

    def post(self, url: str, body: bytes, headers: Mapping[str, str]) -> SendResult:
        # Every error, not only httpx.HTTPError: one stored URL that httpx refuses (InvalidURL is no HTTPError) must
        # fail its own delivery, not the round that records the other targets' deliveries.
        try:
            response = self._client.post(url, content=body, headers=dict(headers))
        except Exception as exc:
            return SendResult(None, failure_reason(exc))
        code = response.status_code
        return SendResult(code, None if 200 <= code < 300 else f"HTTP {code}")

    def close(self) -> None:
        self._client.close()


def failure_reason(exc: Exception) -> str:
    """``ConnectError``, ``ReadTimeout``, ``AddressRefused: loopback``: the class, never the message."""
    if isinstance(exc, AddressRefused):
        return f"{type(exc).__name__}: {exc.reason}"
    return type(exc).__name__


@dataclass(frozen=True)
class SentRequest:
    url: str
    body: bytes
    headers: dict[str, str]


@dataclass
class FakeSender:
    """Answers from a script (status codes, then 200 for ever) and records every request."""

    script: list[int | None] = field(default_factory=list)  # None: a connection error
    sent: list[SentRequest] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def post(self, url: str, body: bytes, headers: Mapping[str, str]) -> SendResult:
        with self._lock:
            self.sent.append(SentRequest(url, body, dict(headers)))
            code = self.script.pop(0) if self.script else 200
        if code is None:
            return SendResult(None, "ConnectError")
        return SendResult(code, None if 200 <= code < 300 else f"HTTP {code}")

    def close(self) -> None:
        return None

"""The HTTP POST behind webhook delivery, as a narrow Protocol: httpx for real, a scripted fake for tests.

A sender never raises for a failed delivery: it answers the status code, or the error in words (a refused
connection, a timeout), which the outbox records and retries.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Protocol

import httpx


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
    """POSTs with one pooled ``httpx.Client``; redirects are not followed (a webhook answers where it is)."""

    def __init__(self, *, timeout_seconds: float, transport: httpx.BaseTransport | None = None) -> None:
        self._client = httpx.Client(timeout=timeout_seconds, follow_redirects=False, transport=transport)

    def post(self, url: str, body: bytes, headers: Mapping[str, str]) -> SendResult:
        try:
            response = self._client.post(url, content=body, headers=dict(headers))
        except httpx.HTTPError as exc:
            return SendResult(None, f"{type(exc).__name__}: {_short(str(exc))}")
        error = None if 200 <= response.status_code < 300 else _short(response.text)
        return SendResult(response.status_code, error)

    def close(self) -> None:
        self._client.close()


def _short(text: str) -> str:
    return text.strip().replace("\n", " ")[:300]


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
            return SendResult(None, "ConnectError: connection refused")
        return SendResult(code, None if 200 <= code < 300 else f"answered {code}")

    def close(self) -> None:
        return None

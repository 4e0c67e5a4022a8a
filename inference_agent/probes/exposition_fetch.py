"""Getting an engine's ``/metrics`` text: over HTTP on a node, from recorded texts in tests and benchmarks.

A fetch is any ``Callable[[str], str]`` from URL to exposition text that raises ``ScrapeFailed`` saying what went
wrong (the probe adds which engine and URL); httpx's own exceptions stay inside ``HttpFetch``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator

import httpx

Fetch = Callable[[str], str]

# ask for the classic text format: prometheus_client serves OpenMetrics to a client that prefers it
ACCEPT = "text/plain;version=0.0.4;q=1.0, */*;q=0.1"


class ScrapeFailed(Exception):
    """The endpoint could not be read: refused, timed out, or answered other than 2xx."""


class HttpFetch:
    """GET with one keep-alive client and a short timeout, so a stuck engine costs the sampler at most that."""

    def __init__(self, timeout_s: float = 2.0, transport: httpx.BaseTransport | None = None) -> None:
        self.timeout_s = timeout_s
        self._client = httpx.Client(timeout=timeout_s, transport=transport, headers={"Accept": ACCEPT})

    def __call__(self, url: str) -> str:
        try:
            response = self._client.get(url)
        except httpx.TimeoutException as exc:
            raise ScrapeFailed(f"timed out after {self.timeout_s:g} s") from exc
        except httpx.HTTPError as exc:
            raise ScrapeFailed(f"{type(exc).__name__}: {exc}") from exc
        if not response.is_success:
            raise ScrapeFailed(f"answered {response.status_code} {response.reason_phrase}")
        return response.text

    def close(self) -> None:
        self._client.close()


class ReplayFetch:
    """Answers each call with the next recorded text, or raises the next recorded failure; exhausted → a failure."""

    def __init__(self, responses: Iterable[str | Exception]) -> None:
        self._responses: Iterator[str | Exception] = iter(responses)

    def __call__(self, url: str) -> str:
        response = next(self._responses, ScrapeFailed("no recorded response left"))
        if isinstance(response, Exception):
            raise response
        return response

"""Engine probes: an external engine's Prometheus endpoint turned into one pool replica's load metrics.

``EngineScrapeProbe`` fetches, parses, keeps the recent scrapes and derives a ``Reading`` from the engine's table
(``wire.scrape.engines``); ``absent()`` says why each catalog metric it lacks is absent.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from inference_agent.probes.base import Reading
from inference_agent.probes.exposition_fetch import Fetch, HttpFetch, ScrapeFailed
from wire.scrape.arithmetic import UnparsableExposition, parse_families
from wire.scrape.engines import MAPPINGS, EngineKind, EngineMapping, derive
from wire.scrape.signals import Interval, Scrape, ScrapeHistory

SCRAPE_FAILED = "scrape failed"


def derive_reading(mapping: EngineMapping, interval: Interval, pool: str) -> tuple[Reading, dict[str, str]]:
    """The pool replica's reading for ``interval``, and why each catalog metric it lacks is absent.

    A value outside its catalog range is dropped, named with its value in the reading's ``error``.
    """
    derived = derive(mapping, interval)
    error = "; ".join(derived.rejected) or None
    return Reading(metrics=derived.metrics, pool=pool, extra=derived.extra, error=error), derived.absent


class EngineScrapeProbe:
    """Scrapes one engine's ``/metrics`` each ``read()`` and reports its pool replica (a ``Probe``).

    A failed scrape answers a reading with no metrics and ``error`` set; the scrapes before it stay the baseline
    for rates until ``max_gap_s`` has passed. ``clock`` is monotonic seconds. ``absent()`` says, after each read,
    why each catalog metric the reading lacks is absent (``AgentTelemetry.watch_engine`` serves it).
    """

    def __init__(
        self,
        kind: EngineKind | str,
        url: str,
        pool: str,
        *,
        fetch: Fetch | None = None,
        clock: Callable[[], float] = time.monotonic,
        window_s: float = 10.0,
        max_gap_s: float = 30.0,
        timeout_s: float = 2.0,
    ) -> None:
        self.kind = EngineKind(kind)
        self.url = url
        self.pool = pool
        self.name = f"engine-{self.kind}"
        self._mapping = MAPPINGS[self.kind]
        self._families = self._mapping.families()
        self._own_fetch: HttpFetch | None = None
        if fetch is None:
            fetch = self._own_fetch = HttpFetch(timeout_s)
        self._fetch = fetch
        self._clock = clock
        self._history = ScrapeHistory(window_s, max_gap_s)
        self._absent: dict[str, str] = {}

    def read(self) -> list[Reading]:
        """One reading for the pool: what this scrape and the recent ones measure, or why nothing could be read."""
        at_s = self._clock()
        try:
            families = parse_families(self._fetch(self.url), self._families)
        except ScrapeFailed as exc:
            return [self._failed(str(exc))]
        except UnparsableExposition as exc:
            return [self._failed(f"not Prometheus text ({exc})")]
        if not families:
            return [self._failed(f"none of the {self.kind} metrics (is it a {self.kind} endpoint?)")]
        reading, self._absent = derive_reading(self._mapping, self._history.add(Scrape(at_s, families)), self.pool)
        return [reading]

    def absent(self) -> dict[str, str]:
        """Catalog metric → why the latest reading lacks it; empty before the first read.

        Worked: TGI after its first scrape → ``{"kv_cache_utilization_ratio": "tgi exposes no KV-cache metric",
        "request_rate_per_second": "needs a second scrape", ...}``; a failed scrape → every metric "scrape failed".
        """
        return dict(self._absent)

    def close(self) -> None:
        """Close the HTTP client this probe opened; an injected fetch belongs to whoever made it."""
        if self._own_fetch is not None:
            self._own_fetch.close()

    def _failed(self, why: str) -> Reading:
        self._absent = {**dict.fromkeys(self._mapping.metrics, SCRAPE_FAILED), **self._mapping.unexposed}
        return Reading(metrics={}, pool=self.pool, error=f"{self.kind} scrape of {self.url} failed: {why}")

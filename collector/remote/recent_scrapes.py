"""Each group's recent scrapes as this process stored or read them, so a derivation reads its previous scrape and
its window's oldest from memory instead of the store.

Trusted only where it holds as many points as the store counts for that (group, time): points are never changed
once stored (a resend is a duplicate, another value a conflict) and the staging job forgets whole scrapes, so an
equal count is the same points. A scrape another worker added to, or one this process never saw (after a restart),
counts differently and is read back. Bounded: a group keeps the scrapes within ``keep_seconds`` of its newest, and
all is forgotten past ``max_points``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping

from collector.remote.derive import Point
from wire.scrape.arithmetic import Families


class _Scrape:
    __slots__ = ("families", "points")

    def __init__(self) -> None:
        self.points: dict[int, float] = {}
        self.families: Families | None = None  # built once from ``points``, dropped when a point joins


class RecentScrapes:
    def __init__(self, *, keep_seconds: float, max_points: int = 2_000_000) -> None:
        self._keep_seconds = keep_seconds
        self._max_points = max_points
        self._points = 0
        self._groups: dict[int, dict[float, _Scrape]] = {}

    def add(self, group: int, ts: float, points: Iterable[Point]) -> None:
        """Points stored at ``group``'s scrape ``ts``."""
        scrape = self._groups.setdefault(group, {}).get(ts)
        if scrape is None:
            scrape = self._groups[group][ts] = _Scrape()
        before = len(scrape.points)
        scrape.points.update(points)
        scrape.families = None
        self._points += len(scrape.points) - before

    def put(self, group: int, ts: float, points: Iterable[Point]) -> None:
        """All the points stored at ``group``'s scrape ``ts``, as read back: what was held before is replaced."""
        dropped = self._groups.setdefault(group, {}).pop(ts, None)
        self._points -= 0 if dropped is None else len(dropped.points)
        self.add(group, ts, points)

    def clear(self) -> None:
        """Forget everything: a transaction that held points rolled back, or the series' names were forgotten."""
        self._groups.clear()
        self._points = 0

    def missing(self, group: int, counts: Mapping[float, int], times: Iterable[float]) -> list[float]:
        """Which of ``times`` this process does not hold as the store counts them (``counts``, by time)."""
        held = self._groups.get(group, {})
        return [ts for ts in times if ts not in held or len(held[ts].points) != counts.get(ts)]

    def families(self, group: int, ts: float, build: Callable[[Iterable[Point]], Families]) -> Families:
        """The families of a held scrape, ``build`` from its points once (none for a scrape not held)."""
        scrape = self._groups.get(group, {}).get(ts)
        if scrape is None:
            return {}
        if scrape.families is None:
            scrape.families = build(scrape.points.items())
        return scrape.families

    def trim(self, groups: Iterable[int]) -> None:
        """Forget ``groups``' scrapes older than ``keep_seconds`` before their newest; all of it past ``max_points``."""
        if self._points > self._max_points:
            self.clear()
            return
        for group in groups:
            held = self._groups.get(group)
            if not held:
                continue
            oldest = max(held) - self._keep_seconds
            for ts in [t for t in held if t < oldest]:
                self._points -= len(held.pop(ts).points)

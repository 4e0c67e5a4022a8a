"""The receiver's staging kept small: points past the window and series no request named for a while go."""

from __future__ import annotations

import logging

from sqlalchemy import Engine, delete

from collector.remote.tables import remote_points, remote_series, remote_unmapped

log = logging.getLogger(__name__)


class StagingRetention:
    """``run(now)`` every minute: staged points older than ``window_seconds`` (no new point can be derived with
    them), series idle for ``idle_series_seconds`` (they no longer count toward their source's ``max_series``) and
    unmapped families as long unsent (they leave room for new names, and the list says what is sent now)."""

    def __init__(self, engine: Engine, *, window_seconds: float, idle_series_seconds: float) -> None:
        if window_seconds <= 0 or idle_series_seconds < window_seconds:
            raise ValueError("window_seconds must be positive and idle_series_seconds at least as long")
        self._engine = engine
        self._window_seconds = window_seconds
        self._idle_series_seconds = idle_series_seconds

    def run(self, now: float) -> tuple[int, int]:
        """Delete both; answer how many points and series went."""
        with self._engine.begin() as conn:
            points = conn.execute(delete(remote_points).where(remote_points.c.ts < now - self._window_seconds))
            series = conn.execute(
                delete(remote_series).where(remote_series.c.last_seen < now - self._idle_series_seconds)
            )
            conn.execute(delete(remote_unmapped).where(remote_unmapped.c.last_seen < now - self._idle_series_seconds))
        if series.rowcount:
            log.info("remote write: forgot %d series idle for %.0f s", series.rowcount, self._idle_series_seconds)
        return points.rowcount or 0, series.rowcount or 0

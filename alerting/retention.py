"""Alerting history kept for ``alert_history_days``: resolved alerts, finished notifications and delivery attempts
older than that are deleted (pending and firing alerts, and notifications still being retried, always stay)."""

from __future__ import annotations

from sqlalchemy import Engine, delete

from alerting.lifecycle import AlertStatus
from alerting.tables import alerts, deliveries, notifications

FINISHED = ("delivered", "abandoned", "dropped", "superseded")


class AlertHistoryRetention:
    def __init__(self, engine: Engine, *, keep_seconds: float) -> None:
        self.engine = engine
        self.keep_seconds = keep_seconds

    def run(self, now: float) -> int:
        """Delete what is past the history; the number of rows deleted."""
        cutoff = now - self.keep_seconds
        with self.engine.begin() as conn:
            done = conn.execute(
                delete(alerts).where(alerts.c.status == AlertStatus.RESOLVED.value, alerts.c.resolved_at < cutoff)
            ).rowcount
            done += conn.execute(
                delete(notifications).where(notifications.c.status.in_(FINISHED), notifications.c.created_at < cutoff)
            ).rowcount
            done += conn.execute(delete(deliveries).where(deliveries.c.ts < cutoff)).rowcount
        return int(done)

"""What the server records of the demo's episode, read from its own APIs (``/api/v1/enforcement-events``,
``/api/v1/alerts``, ``/api/v1/series``) and printed as it happens: "Recorded 1:36 ... globex throttled ...", so a
user sees the throttle and the alerts come, and the burst knows when they have.

The lines are pure (``event_line``, ``alert_line``); ``ServerRecord`` polls and remembers what it has printed."""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from typing import Any

import httpx

from demo.timeline import LATENCY_RULE, clock

Item = Mapping[str, Any]


def event_line(event: Item, load_started: float) -> str:
    """One enforcement event: "Recorded 1:36  throttle  globex on demo-node-3/chat: globex took 84% ... level 1 → 0.5"
    (the enforcer's message names the level)."""
    at = clock(event["ts"] - load_started)
    return f"Recorded {at}  {event['kind']}  {event['tenant']} on {event['scope']}: {event['message']}"


def alert_change(alert: Item) -> float | None:
    """When the alert last changed in a way worth a line: fired (``fired_at``) or, having fired, resolved
    (``resolved_at``); None while it is only pending, or resolved without ever firing."""
    if alert.get("fired_at") is None:
        return None
    if alert["status"] == "firing":
        return float(alert["fired_at"])
    return float(alert["resolved_at"]) if alert["status"] == "resolved" and alert.get("resolved_at") else None


def alert_line(alert: Item, at: float, load_started: float) -> str:
    """An alert that fired or resolved at ``at`` (``alert_change``): "Recorded 2:01  alert P99LatencyAboveSlo firing
    (node=demo-node-3, pool=chat), value 3.5"."""
    labels = alert["labels"]
    where = ", ".join(f"{k}={v}" for k, v in sorted(labels.items()) if k not in ("alertname", "severity", "rule_id"))
    value = f", value {alert['value']:.3g}" if alert["status"] == "firing" and alert.get("value") is not None else ""
    return f"Recorded {clock(at - load_started)}  alert {labels['alertname']} {alert['status']} ({where}){value}"


class ServerRecord:
    """Polls the server's record and prints each new enforcement event and alert change once; thread-safe."""

    def __init__(self, api: httpx.Client, load_started: float, *, out: Callable[[str], None] = print) -> None:
        self.api = api
        self.load_started = load_started  # what an earlier run on the same database recorded before it is not shown
        self.out = out
        self._lock = threading.Lock()
        self._printed: set[tuple[str, int, str]] = set()  # ("event"|"alert", id, status)
        self._throttles: list[tuple[float, str]] = []  # (when, tenant) of each throttle recorded
        self._latency_alerts: list[tuple[float, str]] = []  # (when, pool) of each P99LatencyAboveSlo that fired

    def poll(self) -> None:
        """Read the newest events and alerts once; a server busy or restarting is asked again next time."""
        try:
            events = self.api.get("/enforcement-events", params={"limit": 100}).raise_for_status().json()["items"]
            alerts = self.api.get("/alerts", params={"limit": 100}).raise_for_status().json()["items"]
        except (httpx.HTTPError, ValueError, KeyError):
            return
        with self._lock:
            for event in reversed(events):  # oldest first
                if event["ts"] >= self.load_started and self._first(("event", event["id"], event["kind"])):
                    self.out(event_line(event, self.load_started))
                    if event["kind"] == "throttle":
                        self._throttles.append((event["ts"], event["tenant"]))
            for alert in reversed(alerts):
                at = alert_change(alert)
                if at is None or at < self.load_started or not self._first(("alert", alert["id"], alert["status"])):
                    continue
                self.out(alert_line(alert, at, self.load_started))
                if alert["status"] == "firing" and alert["labels"].get("alertname") == LATENCY_RULE:
                    self._latency_alerts.append((at, alert["labels"].get("pool", "")))

    def _first(self, key: tuple[str, int, str]) -> bool:
        if key in self._printed:
            return False
        self._printed.add(key)
        return True

    def throttled_since(self, ts: float, tenant: str) -> bool:
        with self._lock:
            return any(t >= ts and who == tenant for t, who in self._throttles)

    def latency_alert_since(self, ts: float, pool: str) -> bool:
        with self._lock:
            return any(t >= ts and where == pool for t, where in self._latency_alerts)

    def watch(self, stop: threading.Event, interval_s: float = 2.0) -> None:
        """Poll until ``stop``."""
        while not stop.wait(interval_s):
            self.poll()


def reported_p99s(api: httpx.Client, pool: str, start: float, end: float) -> list[float]:
    """The p99 latencies ``pool``'s replicas reported between ``start`` and ``end`` (Unix seconds), worst replica per
    point, as the server stored them; empty when it has none or cannot answer."""
    params: dict[str, str | float] = {"metric": "request_latency_p99_seconds", "pool": pool, "start": start, "end": end}
    try:
        points = api.get("/series", params=params).raise_for_status().json()["points"]
    except (httpx.HTTPError, ValueError, KeyError):
        return []
    return [float(value) for _ts, value in points]

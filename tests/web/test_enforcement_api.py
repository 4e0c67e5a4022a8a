"""``GET /api/v1/enforcement-events``: viewers read throttles and restores newest first, by tenant, page by page."""

from __future__ import annotations

from collections.abc import Callable

from fastapi.testclient import TestClient

from isolation.events import EnforcementEvent
from web.services import AppServices

Auth = Callable[..., dict[str, str]]


def _event(ts: float, tenant: str, kind: str = "throttle") -> EnforcementEvent:
    level_from, level_to = (1.0, 0.5) if kind == "throttle" else (0.5, 1.0)
    reason = "NoisyNeighbour" if kind == "throttle" else "Calm"
    figures = {"compute_share": 0.9, "victim": "lc"} if kind == "throttle" else {"windows": 3}
    return EnforcementEvent(
        ts, tenant, "node-a", "chat", kind, reason, level_from, level_to, f"{tenant} {kind}", figures
    )


def test_viewers_page_through_events_newest_first(client: TestClient, auth: Auth, services: AppServices) -> None:
    services.enforcement.record([_event(1.0, "bulk"), _event(2.0, "other"), _event(3.0, "bulk", "restore")])
    viewer = auth("viewer")
    first = client.get("/api/v1/enforcement-events", params={"limit": 2}, headers=viewer)
    assert first.status_code == 200, first.text
    page = first.json()
    assert [(i["ts"], i["tenant"], i["kind"]) for i in page["items"]] == [
        (3.0, "bulk", "restore"),
        (2.0, "other", "throttle"),
    ]
    newest = page["items"][0]
    assert newest["scope"] == "node-a/chat" and newest["reason"] == "Calm" and newest["figures"] == {"windows": 3}
    assert (newest["level_from"], newest["level_to"]) == (0.5, 1.0)
    rest = client.get("/api/v1/enforcement-events", params={"limit": 2, "cursor": page["next"]}, headers=viewer).json()
    assert [i["ts"] for i in rest["items"]] == [1.0] and rest["next"] is None
    bulk = client.get("/api/v1/enforcement-events", params={"tenant": "bulk"}, headers=viewer).json()
    assert [i["kind"] for i in bulk["items"]] == ["restore", "throttle"] and bulk["next"] is None


def test_a_bad_cursor_is_422_and_strangers_are_401(client: TestClient, auth: Auth) -> None:
    bad = client.get("/api/v1/enforcement-events", params={"cursor": "abc"}, headers=auth("viewer"))
    assert bad.status_code == 422 and "cursor" in bad.text
    assert client.get("/api/v1/enforcement-events").status_code == 401

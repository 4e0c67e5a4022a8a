"""Server-sent events for a dashboard page: one JSON event every interval until the browser goes away, the
``events`` asked for are sent, or the session ends (re-checked every ``SESSION_RECHECK_SECONDS``: a logout or a
revoked token stops the stream within 5 s). Each stream holds a slot of its session's and the process's
(``web.dashboard.live_limits``: past a cap, 429 naming it) and reads on a live-read thread.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable
from typing import Any

from fastapi import Request
from fastapi.responses import PlainTextResponse, StreamingResponse
from starlette.types import Receive, Scope, Send

from web.dashboard.deps import DashboardUser, get_state, session_token
from web.dashboard.live_limits import LiveStreams, TooManyStreams
from web.dashboard.security import secure
from web.services import AppServices

SESSION_RECHECK_SECONDS = 5.0
REFUSED_RETRY_AFTER_SECONDS = 5  # a slot frees when a live page closes: its stream notices within one interval


class LiveResponse(StreamingResponse):
    """A stream that takes its session's slot when it starts, or answers 429 naming the cap it would pass, and gives
    the slot back however it ends (taken here, not in the route, so that no path leaves a slot taken)."""

    def __init__(self, content: AsyncIterator[str], streams: LiveStreams, session: str) -> None:
        super().__init__(content, media_type="text/event-stream", headers={"Cache-Control": "no-cache"})
        self._streams = streams
        self._session = session

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            self._streams.open(self._session)
        except TooManyStreams as exc:
            refused = PlainTextResponse(
                str(exc), status_code=429, headers={"Retry-After": str(REFUSED_RETRY_AFTER_SECONDS)}
            )
            secure(refused.headers)
            await refused(scope, receive, send)
            return
        try:
            await super().__call__(scope, receive, send)
        finally:
            self._streams.close(self._session)


def event_stream(
    request: Request,
    services: AppServices,
    user: DashboardUser,
    read: Callable[[], dict[str, Any] | None],
    *,
    interval_s: float,
    events: int | None,
) -> StreamingResponse:
    """``text/event-stream`` of ``read()``, run on a live-read thread, every ``interval_s`` (None: nothing to send
    this time, as for a node deleted while its page is open)."""
    state = get_state(request)
    streams = state.live

    async def stream() -> AsyncIterator[str]:
        sent, checked_at = 0, services.clock()
        while events is None or sent < events:
            data = await streams.read(read)
            if data is not None:
                yield f"data: {json.dumps(data, separators=(',', ':'))}\n\n"
            sent += 1
            if await request.is_disconnected() or (events is not None and sent >= events):
                return
            await asyncio.sleep(interval_s)
            if services.clock() - checked_at >= SESSION_RECHECK_SECONDS:
                if await streams.read(session_token, request, state, services) is None:
                    return
                checked_at = services.clock()

    # the session's nonce is drawn anew at each sign-in: one key per session, kept only in this process's memory
    return LiveResponse(stream(), streams, user.session.nonce)

"""Server-sent events for a dashboard page: one JSON event every interval until the browser goes away, the
``events`` asked for are sent, or the session ends (re-checked every ``SESSION_RECHECK_SECONDS``: a logout or a
revoked token stops the stream within 5 s)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable
from typing import Any

from fastapi import Request
from fastapi.responses import StreamingResponse
from starlette.concurrency import run_in_threadpool

from web.dashboard.deps import get_state, session_token
from web.services import AppServices

SESSION_RECHECK_SECONDS = 5.0


def event_stream(
    request: Request,
    services: AppServices,
    read: Callable[[], dict[str, Any] | None],
    *,
    interval_s: float,
    events: int | None,
) -> StreamingResponse:
    """``text/event-stream`` of ``read()``, run off the event loop, every ``interval_s`` (None: nothing to send
    this time, as for a node deleted while its page is open)."""
    state = get_state(request)

    async def stream() -> AsyncIterator[str]:
        sent, checked_at = 0, services.clock()
        while events is None or sent < events:
            data = await run_in_threadpool(read)
            if data is not None:
                yield f"data: {json.dumps(data, separators=(',', ':'))}\n\n"
            sent += 1
            if await request.is_disconnected() or (events is not None and sent >= events):
                return
            await asyncio.sleep(interval_s)
            if services.clock() - checked_at >= SESSION_RECHECK_SECONDS:
                if await run_in_threadpool(session_token, request, state, services) is None:
                    return
                checked_at = services.clock()

    return StreamingResponse(stream(), media_type="text/event-stream", headers={"Cache-Control": "no-cache"})

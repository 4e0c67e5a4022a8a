"""Times in query parameters: Unix seconds or ISO-8601 (CONTRACT section 6)."""

from __future__ import annotations

import math
from datetime import UTC, datetime

from collector.errors import InvalidQuery


def parse_time(name: str, text: str) -> float:
    """``1764424800.5`` or ``2025-11-29T14:00:00Z``; a naive ISO time is UTC."""
    try:
        value = float(text)
    except ValueError:
        try:
            parsed = datetime.fromisoformat(text.replace("Z", "+00:00"))
        except ValueError:
            raise InvalidQuery(name, f"{text!r} is neither Unix seconds nor an ISO-8601 time") from None
        if parsed.tzinfo is None:
            parsed = parsed.replace(tzinfo=UTC)
        return parsed.timestamp()
    if not math.isfinite(value):
        raise InvalidQuery(name, f"{text!r} is not a finite time")
    return value

"""Versioned resources: every operator edit of a pool, a tenant or an alert rule bumps its ``version``, and an
edit that names the version it read fails with :class:`VersionConflict` once someone else changed it meanwhile.

One error for all of them, here below every room that stores one (pools in fleet, tenants in isolation, alert
rules in alerting), so the web answers every conflict once: 409 with the version the resource is at now.
"""

from __future__ import annotations


class VersionConflict(ValueError):
    """``kind`` ``name`` changed since the caller read it at ``expected``: ``current`` is its version now."""

    def __init__(self, kind: str, name: str | int, expected: int, current: int) -> None:
        shown = repr(name) if isinstance(name, str) else str(name)
        super().__init__(f"{kind} {shown} is at version {current}, not {expected}: re-read it and apply the edit again")
        self.kind = kind
        self.name = name
        self.expected = expected
        self.current = current

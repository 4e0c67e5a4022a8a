"""Who holds a leader lease in a database right now, as two servers' tests need to see it."""

from __future__ import annotations

import time

from sqlalchemy import select

from autoscaler.controller import LEASE_NAME
from collector.database import make_engine
from fleet.lease import leases


def lease_holder(url: str, name: str = LEASE_NAME) -> str | None:
    """The holder (``host:pid:...``) of an unexpired lease ``name``, or None."""
    engine = make_engine(url)
    try:
        with engine.connect() as conn:
            return conn.scalar(select(leases.c.holder).where(leases.c.name == name, leases.c.expires_at > time.time()))
    finally:
        engine.dispose()


def wait_for_holder(url: str, *, other_than: str | None = None, timeout_s: float = 15.0) -> str:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        holder = lease_holder(url)
        if holder is not None and holder != other_than:
            return holder
        time.sleep(0.2)
    raise AssertionError(f"no lease holder other than {other_than!r} within {timeout_s} s")


def holder_pid(holder: str) -> int:
    return int(holder.split(":")[1])

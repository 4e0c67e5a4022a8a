"""A real process whose wall clock is off by a fixed amount: libfaketime preloaded (Debian package ``faketime``).

Only the wall clock moves (``time.time()``, what an agent stamps its samples with); the monotonic clock its ticker
and timeouts use stays true, as on a host whose NTP is broken.
"""

from __future__ import annotations

import glob

from tests.support.availability import unavailable


def libfaketime() -> str:
    """The path of libfaketime.so.1, or a skip (a failure under CI=true) naming the package."""
    found = sorted(glob.glob("/usr/lib/*/faketime/libfaketime.so.1") + glob.glob("/usr/lib/faketime/libfaketime.so.1"))
    if not found:
        unavailable("libfaketime.so.1 not found (install the Debian package faketime)")
    return found[0]


def skewed_clock_env(offset_s: int) -> dict[str, str]:
    """Environment for a child whose wall clock reads ``offset_s`` seconds ahead (negative: behind)."""
    return {
        "LD_PRELOAD": libfaketime(),
        "FAKETIME": f"{offset_s:+d}",
        "FAKETIME_DONT_FAKE_MONOTONIC": "1",
    }

"""How every fleetpilot process logs: one line per event at INFO, the chatty libraries at WARNING."""

from __future__ import annotations

import logging

# a line per request, job run or Alembic plugin would bury what matters
CHATTY = ("httpx", "apscheduler", "alembic.runtime.plugins")


def configure_logging() -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    for name in CHATTY:
        logging.getLogger(name).setLevel(logging.WARNING)

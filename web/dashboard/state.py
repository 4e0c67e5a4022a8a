"""What the dashboard keeps per server process: the session store, the failed-login counter, the templates and the
live streams' bounds."""

from __future__ import annotations

import secrets
from dataclasses import asdict, dataclass
from pathlib import Path

from fastapi.templating import Jinja2Templates
from sqlalchemy import Engine

from web.auth_limit import FailedLogins
from web.dashboard import units
from web.dashboard.live_limits import LiveStreams
from web.dashboard.session import SessionStore
from web.settings import WebSettings

TEMPLATES_DIR = Path(__file__).parent / "templates"


@dataclass
class DashboardState:
    sessions: SessionStore
    failed_logins: FailedLogins
    templates: Jinja2Templates
    live: LiveStreams


def templates() -> Jinja2Templates:
    """Jinja2 with autoescaping (the default for .html) and the unit filters every page uses."""
    found = Jinja2Templates(directory=str(TEMPLATES_DIR))
    filters = found.env.filters
    filters["metric"] = lambda value, name: units.metric_value(name, value)
    filters["ratio"] = lambda value: units.ABSENT if value is None else units.ratio(value)
    filters["duration"] = lambda value: units.ABSENT if value is None else units.duration(value)
    filters["number"] = lambda value: units.ABSENT if value is None else units.number(value)
    filters["ts"] = units.timestamp
    filters["age"] = units.age
    filters["bytes"] = lambda value: units.by_unit("bytes", value)
    filters["asdict"] = asdict
    return found


def build_state(settings: WebSettings, engine: Engine) -> DashboardState:
    """A random per-process CSRF key when ``session_secret`` is unset: forms then fail across servers and restarts."""
    secret = (settings.session_secret or secrets.token_urlsafe(48)).encode()
    return DashboardState(
        sessions=SessionStore(engine, secret, lifetime_seconds=settings.session_lifetime_seconds),
        failed_logins=FailedLogins(),
        templates=templates(),
        live=LiveStreams(
            per_session=settings.dashboard_live_streams_per_session,
            per_process=settings.dashboard_live_streams_per_process,
            reads_at_once=settings.dashboard_live_reads_at_once,
        ),
    )

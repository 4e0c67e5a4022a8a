"""Typed settings of the server deployable: flags, then ``FLEETPILOT_*`` variables, then defaults.

Settings are built once at start (``ServerSettings(**flags)``), validated there, and passed in; nothing reads them
from a module global.
"""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path

from pydantic import Field, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

DEFAULT_DATABASE_URL = "sqlite:///./.fleetpilot/fleetpilot.db"
MIN_TOKEN_LENGTH = 32


class Environment(StrEnum):
    DEVELOPMENT = "development"
    PRODUCTION = "production"


class ServerSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="FLEETPILOT_", extra="forbid")

    environment: Environment = Environment.DEVELOPMENT
    host: str = "127.0.0.1"
    port: int = Field(8080, ge=0, le=65535)
    database_url: str = DEFAULT_DATABASE_URL
    # A token to install as the first admin token instead of generating one (e.g. from a Kubernetes Secret).
    admin_token: str | None = None

    ingest_max_body_bytes: int = Field(8 * 1024 * 1024, gt=0)
    ingest_max_samples: int = Field(20_000, gt=0)
    ingest_max_future_seconds: float = Field(300.0, ge=0)
    node_down_after_seconds: float = Field(3.0, gt=0)
    token_cache_seconds: float = Field(5.0, ge=0)

    raw_retention_hours: float = Field(24.0, gt=0)
    rollup_retention_days: float = Field(30.0, gt=0)
    rollup_interval_seconds: float = Field(60.0, gt=0)
    # Each rollup run re-rolls this much before its watermark; older arrivals go through the rollup backlog.
    rollup_lookback_seconds: float = Field(600.0, ge=0)
    retention_interval_seconds: float = Field(300.0, gt=0)
    # Series queries over ranges longer than this read 1-minute rollups instead of raw samples.
    raw_query_max_seconds: float = Field(3600.0, gt=0)

    @model_validator(mode="after")
    def _refuse_insecure(self) -> ServerSettings:
        if self.admin_token is not None and len(self.admin_token) < MIN_TOKEN_LENGTH:
            raise ValueError(f"admin_token must be at least {MIN_TOKEN_LENGTH} characters")
        if self.environment is Environment.PRODUCTION and self.database_url == DEFAULT_DATABASE_URL:
            raise ValueError(
                "production needs an explicit FLEETPILOT_DATABASE_URL (the default is a file in the working directory)"
            )
        return self

    def sqlite_path(self) -> Path | None:
        """The database file when the URL is SQLite on disk, so the server can create its folder."""
        prefix = "sqlite:///"
        if not self.database_url.startswith(prefix) or self.database_url.endswith(":memory:"):
            return None
        return Path(self.database_url.removeprefix(prefix))

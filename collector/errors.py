"""The collector's error tree; the web layer translates each kind into one HTTP answer."""

from __future__ import annotations


class CollectorError(Exception):
    """Base of everything the collector raises on purpose."""


class BatchTooLarge(CollectorError):
    """The body, compressed or not, is over the configured limit."""


class StorageUnavailable(CollectorError):
    """The database cannot be reached or refused the write; the caller should retry later."""


class Overloaded(CollectorError):
    """The batch waited for its commit past the writer's deadline and was not stored: answered after the agent had
    given up, a commit would only come back as duplicates of its resend. The agent keeps it and retries later."""


class DatabaseCorrupt(CollectorError):
    """The SQLite file is damaged: nothing can run on it until it is restored or moved aside."""

    def __init__(self, path: str, detail: str) -> None:
        self.path, self.detail = path, detail
        super().__init__(
            f"the SQLite database {path} is corrupt ({detail}). Stop every fleetpilot process using it, move it "
            f"aside with its -wal and -shm files (mv {path} {path}.corrupt), then restore the latest backup to "
            f"{path}, or start again without it to begin with an empty database."
        )


class InvalidQuery(CollectorError):
    """A query parameter is wrong: ``field`` names it (None: more than one), and the message starts with it."""

    def __init__(self, field: str | None, message: str) -> None:
        super().__init__(f"{field}: {message}" if field is not None else message)
        self.field = field

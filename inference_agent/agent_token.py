"""The agent's bearer token: the one it was given (``FLEETPILOT_TOKEN``), or its token file, re-read when the file
changes and after a 401.

A projected ServiceAccount token rotates: the kubelet writes a new one well before the old expires (by an atomic
swap of the file), so a token read once at start is refused an hour later. The file's identity (inode, mtime, size)
is looked at before each push, one ``stat``; a 401 re-reads it at once (a rotation within one mtime tick). A file
that cannot be read, or is empty, mid-rotation keeps the last token, with a log line, until it can.
"""

from __future__ import annotations

import logging
import os
import threading
from pathlib import Path

log = logging.getLogger(__name__)

Stamp = tuple[int, int, int] | None  # (inode, mtime in ns, size) of the token file, None when it cannot be stat'ed


class AgentToken:
    def __init__(self, token: str, path: Path | None = None) -> None:
        """``token`` as read at start (``AgentSettings`` refuses an unreadable file there); ``path`` its file."""
        self._token = token
        self._path = path
        self._stamp = self._stamp_now()
        self._lock = threading.Lock()

    def current(self) -> str:
        """The token to send now: the file's content again when the file changed since it was last read."""
        if self._path is not None and self._stamp_now() != self._stamp:
            self.reread()
        return self._token

    def reread(self) -> None:
        """Read the token file now (after a 401: the collector may know a newer token than the one sent)."""
        if self._path is None:
            return
        with self._lock:
            self._stamp = self._stamp_now()  # a failure below is logged once per change of the file
            try:
                token = self._path.read_text().strip()
            except OSError as exc:
                log.warning("token file %s: cannot read it (%s); keeping the token read before", self._path, exc)
                return
            if not token:
                log.warning("token file %s is empty; keeping the token read before", self._path)
                return
            if token != self._token:
                log.info("token file %s holds a new token; sending it from now on", self._path)
            self._token = token

    def _stamp_now(self) -> Stamp:
        if self._path is None:
            return None
        try:
            stat = os.stat(self._path)
        except OSError:
            return None
        return (stat.st_ino, stat.st_mtime_ns, stat.st_size)

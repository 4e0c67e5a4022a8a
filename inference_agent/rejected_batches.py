"""Batches the collector refused as invalid (422, or 413 at one sample), set aside in ``spool/rejected/`` for an
operator to read: ``seq-<first>-<last>.json`` with the collector's status and answer and the samples.

They can never succeed, so the spool moves past them; but the directory is bounded, in bytes and in files, the oldest
dropped first, and what was dropped is counted: a node whose every push was refused wrote ~2.6 GB a day here. A batch
larger than the whole bound alone is kept without its samples (its answer says why it was refused).
"""

from __future__ import annotations

import json
import re
import threading
from pathlib import Path
from typing import Any

from wire.samples import SampleJson

_NAME = re.compile(r"^seq-(\d+)-(\d+)\.json$")


class RejectedBatches:
    """``spool/rejected/``, at most ``max_bytes`` and ``max_files`` (files of an earlier run included)."""

    def __init__(self, directory: Path, *, max_bytes: int, max_files: int) -> None:
        self._dir = directory
        self._max_bytes = max_bytes
        self._max_files = max_files
        self._lock = threading.Lock()
        self._kept: dict[Path, int] = {}  # oldest first: path → size
        self.dropped = 0  # files removed to stay within the bounds, since the agent started
        if directory.is_dir():
            found = [(int(m[1]), p) for p in directory.iterdir() if (m := _NAME.match(p.name)) and p.is_file()]
            self._kept = {p: p.stat().st_size for _, p in sorted(found)}
        with self._lock:
            self._trim()

    @property
    def files(self) -> int:
        return len(self._kept)

    @property
    def bytes(self) -> int:
        return sum(self._kept.values())

    def keep(self, first_seq: int, last_seq: int, *, status: int, answer: str, samples: list[SampleJson]) -> Path:
        """Write one refused batch, dropping the oldest ones past the bounds; answers where it went."""
        record: dict[str, Any] = {"status": status, "answer": answer, "samples": samples}
        body = json.dumps(record).encode()
        if len(body) > self._max_bytes:
            record.update(samples=[], samples_left_out=len(samples), answer=answer[: self._max_bytes // 2])
            body = json.dumps(record).encode()
        path = self._dir / f"seq-{first_seq}-{last_seq}.json"
        with self._lock:
            self._dir.mkdir(parents=True, exist_ok=True)
            path.write_bytes(body)
            self._kept.pop(path, None)
            self._kept[path] = len(body)
            self._trim()
        return path

    def _trim(self) -> None:
        """Drop the oldest files while over a bound (the newest always stays: it is the one just refused)."""
        while len(self._kept) > 1 and (len(self._kept) > self._max_files or self.bytes > self._max_bytes):
            oldest = next(iter(self._kept))
            del self._kept[oldest]
            oldest.unlink(missing_ok=True)
            self.dropped += 1

"""The agent's disk spool: every sample is written here before it is pushed, and leaves only once acknowledged.

Samples are JSON lines in segment files (``seg-<first seq>.jsonl``), a new segment every ``segment_seconds`` of
sample time: each line is one ``wire.samples.SampleJson`` as it is pushed, read back and sent as it was written (a
line needs only its ``seq``, the first of a segment its ``ts``). The spool assigns each sample its ``seq``
(strictly increasing, kept across restarts), and the cursor file holds the last ``seq`` the collector acknowledged.
After a crash or SIGKILL the agent re-opens the spool and replays everything after the cursor with the original
``seq``; a sample pushed but not yet acknowledged is sent again and the collector counts it as a duplicate. The
spool is bounded: past ``max_segments`` (default 60 segments of 60 s: one hour) the oldest segment is dropped and
its unacknowledged samples are counted as lost and logged.
"""

from __future__ import annotations

import json
import logging
import os
import threading
from dataclasses import dataclass
from pathlib import Path

from wire.samples import SampleJson, UnsequencedSampleJson

log = logging.getLogger(__name__)

CURSOR_FILE = "cursor.json"
SEGMENT_PREFIX = "seg-"
SEGMENT_SUFFIX = ".jsonl"


class SpoolCorrupt(Exception):
    """A segment holds a line that is not a sample."""


@dataclass(frozen=True)
class SpoolBatch:
    samples: list[SampleJson]
    last_seq: int
    # where the next read starts once this batch is acknowledged
    segment: Path
    offset: int


@dataclass
class _Segment:
    path: Path
    first_seq: int
    first_ts: float
    last_seq: int


class Spool:
    def __init__(
        self, directory: Path, *, segment_seconds: float = 60.0, max_segments: int = 60, fsync: bool = False
    ) -> None:
        self._dir = directory
        self._segment_seconds = segment_seconds
        self._max_segments = max_segments
        self._fsync = fsync
        self._lock = threading.Lock()
        self.lost_samples = 0
        self.corrupt_segments = 0
        self._dir.mkdir(parents=True, exist_ok=True)
        self._acked_seq = self._load_cursor()
        self._seq_floor = 0  # the highest seq seen in a segment moved aside at start: never handed out again
        self._segments = self._recover_segments()
        last_written = self._segments[-1].last_seq if self._segments else 0
        self._next_seq = max(last_written, self._acked_seq, self._seq_floor) + 1
        self._reader: tuple[Path, int] | None = None

    # -- writing -------------------------------------------------------------------------------------------------

    def append(self, samples: list[UnsequencedSampleJson]) -> list[SampleJson]:
        """Give each sample the next ``seq`` and write them; returns them as spooled (written to the OS by then)."""
        if not samples:
            return []
        with self._lock:
            segment = self._writable_segment(samples[0]["ts"])
            spooled: list[SampleJson] = []
            lines = []
            for sample in samples:
                sequenced: SampleJson = {**sample, "seq": self._next_seq}
                self._next_seq += 1
                spooled.append(sequenced)
                lines.append(json.dumps(sequenced, separators=(",", ":"), allow_nan=False))
            with segment.path.open("a", encoding="utf-8") as f:
                f.write("\n".join(lines) + "\n")
                f.flush()
                if self._fsync:
                    os.fsync(f.fileno())
            segment.last_seq = spooled[-1]["seq"]
            return spooled

    def _writable_segment(self, ts: float) -> _Segment:
        current = self._segments[-1] if self._segments else None
        if current is not None and ts - current.first_ts < self._segment_seconds:
            return current
        segment = _Segment(
            self._dir / f"{SEGMENT_PREFIX}{self._next_seq:020d}{SEGMENT_SUFFIX}", self._next_seq, ts, self._next_seq - 1
        )
        self._segments.append(segment)
        self._enforce_bound()
        return segment

    def _enforce_bound(self) -> None:
        while len(self._segments) > self._max_segments:
            oldest = self._segments.pop(0)
            unacked = max(0, oldest.last_seq - max(self._acked_seq, oldest.first_seq - 1))
            if unacked:
                self.lost_samples += unacked
                log.warning(
                    "spool full (%d segments): dropped %d unacknowledged samples (seq %d..%d) to make room",
                    self._max_segments,
                    unacked,
                    max(oldest.first_seq, self._acked_seq + 1),
                    oldest.last_seq,
                )
            oldest.path.unlink(missing_ok=True)
            if self._reader is not None and self._reader[0] == oldest.path:
                self._reader = None

    # -- reading and acknowledging -------------------------------------------------------------------------------

    def read(self, max_samples: int) -> SpoolBatch | None:
        """Up to ``max_samples`` unacknowledged samples in ``seq`` order, or None when all are acknowledged."""
        with self._lock:
            samples: list[SampleJson] = []
            position = self._reader
            for segment in list(self._segments):
                if segment.last_seq <= self._acked_seq or (position and segment.path.name < position[0].name):
                    continue
                offset = position[1] if position and position[0] == segment.path else 0
                try:
                    offset = self._read_segment(segment, offset, samples, max_samples)
                except SpoolCorrupt as exc:
                    self._quarantine(segment, str(exc))
                    continue
                position = (segment.path, offset)
                if len(samples) >= max_samples:
                    break
            if not samples or position is None:
                return None
            return SpoolBatch(samples, samples[-1]["seq"], position[0], position[1])

    def _read_segment(self, segment: _Segment, offset: int, out: list[SampleJson], limit: int) -> int:
        with segment.path.open("rb") as f:
            f.seek(offset)
            while len(out) < limit:
                line = f.readline()
                if not line.endswith(b"\n"):  # end of file, or a line still being written
                    break
                offset += len(line)
                try:
                    sample = json.loads(line)
                    seq = int(sample["seq"])
                except (ValueError, KeyError, TypeError) as exc:
                    raise SpoolCorrupt(f"byte {offset - len(line)}: {exc}") from None
                if seq > self._acked_seq:
                    out.append(sample)
        return offset

    def ack(self, batch: SpoolBatch) -> None:
        """The collector committed ``batch``: move the cursor past it and delete segments no longer needed."""
        with self._lock:
            self._acked_seq = max(self._acked_seq, batch.last_seq)
            self._reader = (batch.segment, batch.offset)
            self._save_cursor()
            while len(self._segments) > 1 and self._segments[0].last_seq <= self._acked_seq:
                self._segments.pop(0).path.unlink(missing_ok=True)

    @property
    def pending(self) -> int:
        with self._lock:
            return sum(max(0, s.last_seq - max(self._acked_seq, s.first_seq - 1)) for s in self._segments)

    @property
    def acked_seq(self) -> int:
        return self._acked_seq

    # -- recovery --------------------------------------------------------------------------------------------------

    def _load_cursor(self) -> int:
        path = self._dir / CURSOR_FILE
        if not path.exists():
            return 0
        try:
            return int(json.loads(path.read_text())["acked_seq"])
        except (ValueError, KeyError, TypeError) as exc:
            aside = path.with_suffix(".corrupt")
            path.replace(aside)
            log.error(
                "spool cursor %s is unreadable (%s); moved to %s and replaying the whole spool "
                "(the collector drops what it already has)",
                path,
                exc,
                aside,
            )
            return 0

    def _save_cursor(self) -> None:
        path = self._dir / CURSOR_FILE
        tmp = path.with_suffix(".tmp")
        with tmp.open("w") as f:
            json.dump({"acked_seq": self._acked_seq}, f)
            if self._fsync:
                f.flush()
                os.fsync(f.fileno())
        tmp.replace(path)

    def _recover_segments(self) -> list[_Segment]:
        segments = []
        for path in sorted(self._dir.glob(f"{SEGMENT_PREFIX}*{SEGMENT_SUFFIX}")):
            try:
                segment = self._scan(path)
            except SpoolCorrupt as exc:
                # its samples may be committed though never acknowledged: reusing their seqs would make new
                # samples look like duplicates to the collector, which would drop them
                self._seq_floor = max(self._seq_floor, _highest_seq(path))
                self._move_aside(path, str(exc))
                continue
            if segment is None:
                path.unlink()
            else:
                segments.append(segment)
        return segments

    def _scan(self, path: Path) -> _Segment | None:
        """First and last sample of a segment; a torn last line (a crash mid-write) is cut off."""
        data = path.read_bytes()
        complete = data[: data.rfind(b"\n") + 1]
        if len(complete) != len(data):
            with path.open("r+b") as f:
                f.truncate(len(complete))
            log.warning("spool segment %s: cut off a torn last line of %d bytes", path.name, len(data) - len(complete))
        lines = complete.splitlines()
        if not lines:
            return None
        try:
            first, last = json.loads(lines[0]), json.loads(lines[-1])
            return _Segment(path, int(first["seq"]), float(first["ts"]), int(last["seq"]))
        except (ValueError, KeyError, TypeError) as exc:
            raise SpoolCorrupt(str(exc)) from None

    def _quarantine(self, segment: _Segment, reason: str) -> None:
        self._segments.remove(segment)
        self._move_aside(segment.path, reason)

    def _move_aside(self, path: Path, reason: str) -> None:
        aside_dir = self._dir / "corrupt"
        aside_dir.mkdir(exist_ok=True)
        path.replace(aside_dir / path.name)
        self.corrupt_segments += 1
        log.error(
            "spool segment %s is corrupt (%s): moved to %s; the agent goes on with the rest",
            path.name,
            reason,
            aside_dir,
        )


def _highest_seq(path: Path) -> int:
    """The highest seq a damaged segment still shows: its readable lines, else its name (``seg-<first seq>``)."""
    highest = 0
    name = path.name.removeprefix(SEGMENT_PREFIX).removesuffix(SEGMENT_SUFFIX)
    if name.isdigit():
        highest = int(name)
    for line in path.read_bytes().splitlines():
        try:
            highest = max(highest, int(json.loads(line)["seq"]))
        except (ValueError, KeyError, TypeError):
            continue
    return highest

"""The spool: seq assigned once and kept across restarts, replay after the cursor, corruption survived, bounded."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from inference_agent.spool import Spool
from wire.samples import SampleJson, UnsequencedSampleJson


def samples(count: int, ts: float = 1000.0, step: float = 0.5) -> list[UnsequencedSampleJson]:
    return [
        {"ts": ts + i * step, "device": 0, "pool": None, "metrics": {"gpu_utilization_ratio": 0.5}, "extra": {}}
        for i in range(count)
    ]


def seqs_of(spooled: list[SampleJson]) -> list[int]:
    return [s["seq"] for s in spooled]


def drain(spool: Spool, max_samples: int = 1000) -> list[int]:
    seqs: list[int] = []
    while (batch := spool.read(max_samples)) is not None:
        seqs += [s["seq"] for s in batch.samples]
        spool.ack(batch)
    return seqs


def test_seqs_increase_and_reads_come_in_order(tmp_path: Path) -> None:
    spool = Spool(tmp_path)
    assert seqs_of(spool.append(samples(3))) == [1, 2, 3]
    assert seqs_of(spool.append(samples(2, ts=1002))) == [4, 5]
    assert spool.pending == 5
    batch = spool.read(4)
    assert batch is not None
    assert [s["seq"] for s in batch.samples] == [1, 2, 3, 4]
    assert spool.pending == 5  # read is not acknowledged
    spool.ack(batch)
    assert spool.pending == 1
    assert drain(spool) == [5]
    assert spool.read(10) is None


def test_a_sample_is_written_as_one_compact_json_line_seq_last(tmp_path: Path) -> None:
    sample: UnsequencedSampleJson = {
        "ts": 1000.5,
        "device": 0,
        "pool": None,
        "metrics": {"gpu_power_watts": 350.0, "gpu_memory_used_bytes": 1048576},
        "extra": {"gpu_clocks_event_reason_names": ["gpu_idle"]},
    }
    (spooled,) = Spool(tmp_path).append([sample])
    assert spooled == {**sample, "seq": 1}
    (segment,) = tmp_path.glob("seg-*.jsonl")
    assert segment.read_bytes() == (
        b'{"ts":1000.5,"device":0,"pool":null,"metrics":{"gpu_power_watts":350.0,"gpu_memory_used_bytes":1048576},'
        b'"extra":{"gpu_clocks_event_reason_names":["gpu_idle"]},"seq":1}\n'
    )


def test_a_spool_written_before_is_read_back_as_it_was_written(tmp_path: Path) -> None:
    """A segment left by an earlier agent: its lines are pushed as they are, whatever their key order or keys."""
    lines: list[dict[str, object]] = [
        {"ts": 1000.0, "device": None, "pool": "chat", "metrics": {"queue_depth_requests": 3}, "seq": 41},
        {"seq": 42, "ts": 1000.5, "metrics": {}, "extra": {"probe_error": "timeout"}, "device": 1},
    ]
    (tmp_path / "seg-00000000000000000041.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    spool = Spool(tmp_path)
    batch = spool.read(10)
    assert batch is not None
    assert batch.samples == lines
    assert [list(sample) for sample in batch.samples] == [list(line) for line in lines]
    assert seqs_of(spool.append(samples(1, ts=1001))) == [43]


def test_unacknowledged_samples_survive_a_restart_with_their_seq(tmp_path: Path) -> None:
    spool = Spool(tmp_path)
    spool.append(samples(6))
    batch = spool.read(2)
    assert batch is not None
    spool.ack(batch)
    spool.read(3)  # read but never acknowledged: the agent died before the answer came
    reopened = Spool(tmp_path)
    assert reopened.pending == 4
    assert drain(reopened) == [3, 4, 5, 6]
    assert seqs_of(reopened.append(samples(1, ts=2000))) == [7]


def test_seq_continues_after_everything_was_acknowledged_and_deleted(tmp_path: Path) -> None:
    spool = Spool(tmp_path, segment_seconds=1)
    spool.append(samples(4, step=1))  # one segment per sample
    drain(spool)
    assert seqs_of(Spool(tmp_path).append(samples(1, ts=5000))) == [5]


def test_acknowledged_segments_are_deleted(tmp_path: Path) -> None:
    spool = Spool(tmp_path, segment_seconds=10)
    for minute in range(5):
        spool.append(samples(4, ts=1000 + minute * 10))
    assert len(list(tmp_path.glob("seg-*.jsonl"))) == 5
    drain(spool)
    assert len(list(tmp_path.glob("seg-*.jsonl"))) == 1  # the segment still being written stays


def test_a_torn_last_line_is_cut_off(tmp_path: Path) -> None:
    spool = Spool(tmp_path)
    spool.append(samples(3))
    segment = next(tmp_path.glob("seg-*.jsonl"))
    with segment.open("a") as f:
        f.write('{"ts": 1001.5, "seq": 4, "met')  # SIGKILL in the middle of a write
    reopened = Spool(tmp_path)
    assert drain(reopened) == [1, 2, 3]
    assert seqs_of(reopened.append(samples(1, ts=1002))) == [4]


def test_a_corrupt_segment_is_moved_aside_and_the_rest_goes_on(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    spool = Spool(tmp_path, segment_seconds=10)
    spool.append(samples(2, ts=1000))
    spool.append(samples(2, ts=1010))
    spool.append(samples(2, ts=1020))
    middle = sorted(tmp_path.glob("seg-*.jsonl"))[1]
    middle.write_bytes(middle.read_bytes().replace(b'"seq":4', b'"seq":!!'))
    reopened = Spool(tmp_path, segment_seconds=10)
    assert drain(reopened) == [1, 2, 5, 6]
    assert (tmp_path / "corrupt" / middle.name).exists()
    assert reopened.corrupt_segments == 1
    assert "corrupt" in caplog.text


def test_an_unreadable_cursor_replays_everything(tmp_path: Path) -> None:
    spool = Spool(tmp_path)
    spool.append(samples(3))
    batch = spool.read(2)
    assert batch is not None
    spool.ack(batch)
    (tmp_path / "cursor.json").write_text("{not json")
    reopened = Spool(tmp_path)
    assert drain(reopened) == [1, 2, 3]  # the collector counts 1 and 2 as duplicates
    assert (tmp_path / "cursor.corrupt").exists()


def test_the_bound_drops_the_oldest_segment_and_counts_the_loss(tmp_path: Path) -> None:
    spool = Spool(tmp_path, segment_seconds=10, max_segments=3)
    for k in range(5):
        spool.append(samples(4, ts=1000 + k * 10))
    assert spool.lost_samples == 8  # two segments of 4 never acknowledged
    assert drain(spool) == list(range(9, 21))


def test_reads_span_segments_and_respect_the_batch_size(tmp_path: Path) -> None:
    spool = Spool(tmp_path, segment_seconds=1)
    spool.append(samples(10, step=0.25))  # 4 samples per segment
    batch = spool.read(7)
    assert batch is not None
    assert [s["seq"] for s in batch.samples] == list(range(1, 8))
    spool.ack(batch)
    assert drain(spool, max_samples=2) == [8, 9, 10]


def test_seq_never_goes_back_below_a_segment_moved_aside_at_start(tmp_path: Path) -> None:
    """Samples pushed and committed but not yet acknowledged when the agent died sit in the last segment; if that
    segment is found corrupt at start, new samples must not reuse its seqs, or the collector would drop them as
    duplicates of the committed ones."""
    spool = Spool(tmp_path)
    spool.append(samples(3))
    spool.ack(spool.read(10))  # type: ignore[arg-type]
    spool.append(samples(5, ts=1002))  # seq 4..8 in the one segment, pushed, never acknowledged
    (segment,) = tmp_path.glob("seg-*.jsonl")
    lines = segment.read_bytes().splitlines(keepends=True)
    segment.write_bytes(b"garbage\n" + b"".join(lines[1:]))  # its first line: the whole segment is unreadable
    reopened = Spool(tmp_path)
    assert reopened.corrupt_segments == 1
    assert seqs_of(reopened.append(samples(1, ts=1010))) == [9]

"""The replay probe: plays recorded raw NVML values through the NVML probe's own ``to_reading``, for tests and the
overhead benchmark.

A recording is JSON lines: a ``meta`` record (where the values come from), one ``inventory`` record per GPU (the
``GpuInfo`` fields) and one ``sample`` record per GPU per sample (``sample`` number, ``index``, the raw values in
``nvml`` keyed by ``RawField``, and ``errors``, the failed calls' lines). The probe loops over the samples, and can
stand for more GPUs than were recorded: device 5 of 8 from a 2-GPU recording plays recorded GPU 1 (5 mod 2), shifted
by a quarter of the recording (copy 2 of 4) so the stand-ins do not move in lockstep.
"""

from __future__ import annotations

import dataclasses
import json
import math
import uuid
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from inference_agent.probes.base import GpuInfo, Reading
from inference_agent.probes.nvml import RawField, RawGpuSample, to_reading

DEFAULT_RECORDING = "nvml_h100_recording.jsonl"
_RAW_KEYS = frozenset(f.value for f in RawField)
_INFO_FIELDS = ("name", "uuid", "memory_total_bytes", "driver_version")


class RecordingError(ValueError):
    """A recording line that is not a valid record; the message names the line."""


@dataclass(frozen=True)
class Recording:
    """A parsed recording: the inventory, and per sample the raw values of every recorded GPU in index order."""

    inventory: tuple[GpuInfo, ...]
    samples: tuple[tuple[RawGpuSample, ...], ...]
    meta: dict[str, Any] = dataclasses.field(default_factory=dict)


def inventory_record(info: GpuInfo) -> dict[str, Any]:
    """The recording line of one GPU's inventory (``NvmlProbe.inventory()`` → file)."""
    return {"kind": "inventory", "index": info.index, **{name: getattr(info, name) for name in _INFO_FIELDS}}


def sample_record(sample: int, raw: RawGpuSample) -> dict[str, Any]:
    """The recording line of one GPU at one sample (``NvmlProbe.read_raw()`` → file)."""
    record: dict[str, Any] = {"kind": "sample", "sample": sample, "index": raw.index, "nvml": dict(raw.values)}
    if raw.errors:
        record["errors"] = list(raw.errors)
    return record


def recording_lines(
    inventory: Sequence[GpuInfo], samples: Iterable[Sequence[RawGpuSample]], meta: dict[str, Any]
) -> Iterator[str]:
    """A recording's JSON lines: ``meta`` (``synthetic``, ``interval_s``, ``note``, ...), then the inventory, then
    each sample's GPUs (``NvmlProbe.inventory()`` and successive ``read_raw()`` → file)."""
    yield json.dumps({"kind": "meta", **meta}, separators=(",", ":")) + "\n"
    for info in inventory:
        yield json.dumps(inventory_record(info), separators=(",", ":")) + "\n"
    for number, raws in enumerate(samples):
        for raw in raws:
            yield json.dumps(sample_record(number, raw), separators=(",", ":")) + "\n"


def parse_recording(lines: Iterable[str]) -> Recording:
    """Parse recording lines; ``RecordingError`` names the first bad line."""
    meta: dict[str, Any] = {}
    inventory: dict[int, GpuInfo] = {}
    samples: dict[int, dict[int, RawGpuSample]] = {}
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
            kind = record["kind"]
            if kind == "meta":
                meta.update(record)
            elif kind == "inventory":
                inventory[int(record["index"])] = GpuInfo(int(record["index"]), *(record[f] for f in _INFO_FIELDS))
            elif kind == "sample":
                samples.setdefault(int(record["sample"]), {})[int(record["index"])] = _raw_sample(record)
            else:
                raise ValueError(f"unknown kind {kind!r}")
        except (ValueError, KeyError, TypeError) as exc:
            raise RecordingError(f"recording line {number}: {exc!r}") from exc
    return _assemble(meta, inventory, samples)


def _raw_sample(record: dict[str, Any]) -> RawGpuSample:
    values = record["nvml"]
    unknown = set(values) - _RAW_KEYS
    if unknown:
        raise ValueError(f"unknown raw NVML fields {sorted(unknown)}")
    if not all(type(v) is int for v in values.values()):
        raise ValueError("raw NVML values are integers, as NVML returns them")
    return RawGpuSample(int(record["index"]), dict(values), [str(e) for e in record.get("errors", [])])


def _assemble(
    meta: dict[str, Any], inventory: dict[int, GpuInfo], samples: dict[int, dict[int, RawGpuSample]]
) -> Recording:
    """Check that every sample holds exactly the inventory's GPUs, then order samples and GPUs."""
    indexes = sorted(inventory)
    if not indexes or not samples:
        raise RecordingError("a recording needs at least one inventory record and one sample")
    for number, gpus in samples.items():
        if sorted(gpus) != indexes:
            raise RecordingError(f"sample {number} has GPUs {sorted(gpus)}, the inventory {indexes}")
    ordered = tuple(tuple(samples[n][i] for i in indexes) for n in sorted(samples))
    return Recording(tuple(inventory[i] for i in indexes), ordered, meta)


def load_recording(path: str | Path | None = None) -> Recording:
    """A recording from ``path``, or the packaged synthetic H100 recording when ``path`` is None or empty."""
    if not path:
        text = resources.files("inference_agent.probes").joinpath("fixtures", DEFAULT_RECORDING).read_text()
    else:
        text = Path(path).read_text()
    return parse_recording(text.splitlines())


def _stand_in_uuid(recorded: str | None, copy: int) -> str | None:
    """Copy 0 keeps the recorded UUID; later copies get a stable one of their own (UUIDs name one GPU each)."""
    if recorded is None or copy == 0:
        return recorded
    return f"GPU-{uuid.uuid5(uuid.NAMESPACE_URL, f'fleetpilot-replay/{recorded}/{copy}')}"


class ReplayProbe:
    """Plays a recording in a loop, one sample per ``read``, as ``gpus`` devices (default: as recorded)."""

    name = "replay"

    def __init__(self, recording: Recording, *, gpus: int | None = None) -> None:
        recorded = len(recording.inventory)
        self._recording = recording
        self._gpus = recorded if gpus is None else gpus
        if self._gpus < 1:
            raise ValueError(f"gpus must be at least 1, not {self._gpus}")
        copies = math.ceil(self._gpus / recorded)
        length = len(recording.samples)
        # device d plays recorded GPU d mod k, its copy c = d // k starting c × length / copies samples in
        self._sources = [(d % recorded, (d // recorded) * length // copies) for d in range(self._gpus)]
        self._position = 0

    @classmethod
    def from_file(cls, path: str | Path | None = None, *, gpus: int | None = None) -> ReplayProbe:
        return cls(load_recording(path), gpus=gpus)

    def inventory(self) -> list[GpuInfo]:
        recorded = len(self._recording.inventory)
        return [
            dataclasses.replace(
                self._recording.inventory[source],
                index=device,
                uuid=_stand_in_uuid(self._recording.inventory[source].uuid, device // recorded),
            )
            for device, (source, _offset) in enumerate(self._sources)
        ]

    def read(self) -> list[Reading]:
        samples = self._recording.samples
        readings = [
            to_reading(dataclasses.replace(samples[(self._position + offset) % len(samples)][source], index=device))
            for device, (source, offset) in enumerate(self._sources)
        ]
        self._position = (self._position + 1) % len(samples)
        return readings

    def close(self) -> None:
        """Nothing to release."""

"""How Prometheus series become fleetpilot's nodes, GPUs, pools and load metrics: a declarative mapping file.

A mapping is a list of sources, tried in order; the first whose families hold a series' name (and whose ``select``
labels it carries) takes it. A source says which labels name the node, the GPU and the pool, and which signal gives
each catalog metric: either one of the engine tables the agent reads (``engine: vllm``) or its own gauges, rates and
histogram quantiles. Everything a source derives for one (node, GPU, pool) at one scrape time is one sample.

Worked (the shipped ``default-mapping.yaml``): ``DCGM_FI_DEV_FB_USED{Hostname="gpu-7",gpu="2"} 40960`` → source
``dcgm-exporter``, node ``gpu-7``, device 2, ``gpu_memory_used_bytes`` 40960 × 1048576; with ``DCGM_FI_DEV_FB_FREE``
40960 in the same scrape, the GPU's ``memory_total_bytes`` is 81920 × 1048576. A series no source takes
(``go_goroutines``) is counted as unmapped and never stored.
"""

from __future__ import annotations

import math
import re
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from collector.remote.pool_names import pool_for_model
from collector.remote.series import RemoteSeries
from wire.catalog import METRIC_NAMES
from wire.control import NAME_PATTERN
from wire.scrape.arithmetic import Combine, mean, selector
from wire.scrape.engines import MAPPINGS, EngineKind, EngineMapping
from wire.scrape.signals import Gauge, HistogramQuantile, Rate, Signal

DEFAULT_MAPPING = Path(__file__).with_name("default-mapping.yaml")
# what follows a family's name in its series' names (the exposition's counter, histogram and summary samples)
SAMPLE_SUFFIXES = ("_total", "_bucket", "_count", "_sum")
_COMBINE: dict[str, Combine] = {"sum": math.fsum, "max": max, "min": min, "mean": mean}
_NAME = re.compile(NAME_PATTERN)  # agent ingest's node and pool names (wire.control), on every path in


class MappingError(ValueError):
    """A mapping file that cannot be read or does not describe a mapping; the message names the file and field."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class GaugeSpec(_Strict):
    gauge: str
    scale: float = 1.0
    combine: Literal["sum", "max", "min", "mean"] = "sum"
    where: dict[str, str] = Field(default_factory=dict)

    def signal(self) -> Signal:
        return Gauge(self.gauge, _COMBINE[self.combine], self.scale, selector(**self.where))


class RateSpec(_Strict):
    """Per-second increase of counters (``_total`` series), summed over the families and their label sets."""

    rate: list[str] = Field(min_length=1)
    suffix: str = "_total"
    scale: float = 1.0
    where: dict[str, str] = Field(default_factory=dict)

    def signal(self) -> Signal:
        return Rate(tuple(self.rate), self.suffix, self.scale, selector(**self.where))


class QuantileSpec(_Strict):
    """A quantile of a histogram's observations over the contract's 10 s window (or the scrape interval, if longer)."""

    histogram: str
    quantile: float = Field(0.99, gt=0, le=1)
    scale: float = 1.0

    def signal(self) -> Signal:
        return HistogramQuantile(self.histogram, self.quantile, self.scale)


SignalSpec = GaugeSpec | RateSpec | QuantileSpec


class MemoryTotalSpec(_Strict):
    """A GPU's memory size from gauges of the same scrape, as an agent reads nvmlDeviceGetMemoryInfo().total: the sum
    of ``sum`` (each needed) and of the ``optional`` ones present, times ``scale``. dcgm-exporter sends no total by
    default: FB_USED + FB_FREE (+ FB_RESERVED where its counters list it) MiB is one."""

    sum: list[str] = Field(min_length=1)
    optional: list[str] = Field(default_factory=list)
    scale: float = Field(1.0, gt=0)

    def signals(self) -> tuple[tuple[Gauge, ...], tuple[Gauge, ...]]:
        """(needed, optional) gauges, each summed over its series of the GPU."""
        return tuple(Gauge(f, scale=self.scale) for f in self.sum), tuple(
            Gauge(f, scale=self.scale) for f in self.optional
        )


class SourceSpec(_Strict):
    """One exporter or engine: how its series name a node, GPU and pool, and what it measures."""

    name: str = Field(pattern=r"^[a-z0-9][a-z0-9_.-]{0,63}$")
    engine: EngineKind | None = None
    metrics: dict[str, SignalSpec] = Field(default_factory=dict)
    select: dict[str, str] = Field(default_factory=dict)  # labels a series must carry, with these values
    exclude: dict[str, str] = Field(default_factory=dict)  # label → regex: matching series are left out
    node: list[str] = Field(min_length=1)  # the first of these labels a series carries names its node
    device: str | None = None  # the label holding the GPU index
    pool: list[str] = Field(default_factory=list)
    # the label naming the model an engine serves: without a pool label the pool is named after it (pool_for_model)
    model: str | None = None
    memory_total: MemoryTotalSpec | None = None  # a GPU's memory size (devices.memory_total_bytes)
    device_labels: dict[Literal["name", "uuid", "driver_version"], str] = Field(default_factory=dict)
    max_series: Annotated[int, Field(gt=0, le=1_000_000)] = 10_000

    @field_validator("metrics")
    @classmethod
    def _catalog_names(cls, metrics: dict[str, SignalSpec]) -> dict[str, SignalSpec]:
        unknown = sorted(set(metrics) - set(METRIC_NAMES))
        if unknown:
            raise ValueError(f"not catalog metrics: {', '.join(unknown)} (CONTRACT section 4 names the 12)")
        return metrics

    @field_validator("exclude")
    @classmethod
    def _regexes(cls, exclude: dict[str, str]) -> dict[str, str]:
        for label, pattern in exclude.items():
            try:
                re.compile(pattern)
            except re.error as exc:
                raise ValueError(f"exclude.{label}: {pattern!r} is not a regular expression ({exc})") from None
        return exclude

    @model_validator(mode="after")
    def _one_kind(self) -> SourceSpec:
        if (self.engine is not None) != bool(self.metrics):
            return self
        raise ValueError("name either an engine or metrics, not both or neither")


class MappingSpec(_Strict):
    sources: list[SourceSpec] = Field(min_length=1)

    @model_validator(mode="after")
    def _unique_names(self) -> MappingSpec:
        names = [s.name for s in self.sources]
        doubled = sorted({n for n in names if names.count(n) > 1})
        if doubled:
            raise ValueError(f"source names must be unique: {', '.join(doubled)}")
        return self


@dataclass(frozen=True)
class Unplaced:
    """Why a series lands nowhere: a fixed reason (``collector.remote.staging.Dropped``) and, where the sender can
    fix it, what to fix (``node name 'a/b' ...``)."""

    reason: str
    detail: str = ""


@dataclass(frozen=True)
class SeriesPlace:
    """Where one series lands: its source, node, GPU (``None``: none) and pool (``None``: none), and the model the
    series says it serves (``None``: it names none)."""

    source: str
    node_id: str
    device: int | None
    pool: str | None
    model: str | None = None


class Source:
    """A compiled source: its signal table (an ``EngineMapping``, as the agent's probes use) and its label rules."""

    def __init__(self, spec: SourceSpec) -> None:
        self.spec = spec
        self.name = spec.name
        if spec.engine is not None:
            self.table = MAPPINGS[spec.engine]
        else:
            self.table = EngineMapping(metrics={name: s.signal() for name, s in spec.metrics.items()}, extra={})
        self.memory_total = spec.memory_total.signals() if spec.memory_total is not None else None
        self._exclude = {label: re.compile(pattern) for label, pattern in spec.exclude.items()}

    @cached_property
    def families(self) -> frozenset[str]:
        memory = self.spec.memory_total
        return self.table.families() | frozenset(memory.sum + memory.optional if memory is not None else ())

    def takes(self, family: str, labels: Mapping[str, str]) -> bool:
        if family not in self.families:
            return False
        if any(labels.get(k) != v for k, v in self.spec.select.items()):
            return False
        return not any(p.fullmatch(labels.get(label, "")) for label, p in self._exclude.items())

    def place(self, labels: Mapping[str, str]) -> SeriesPlace | Unplaced:
        """Where a series of this source lands, or why it cannot (``no_node``, ``bad_device``, ``bad_name``: a node
        or pool name that agent ingest's ``NAME_PATTERN`` refuses, ``<img …>``, ``a/b`` or a newline)."""
        node = next((labels[name] for name in self.spec.node if labels.get(name)), None)
        if node is None:
            return Unplaced("no_node")
        if "instance" in self.spec.node and node == labels.get("instance"):
            node = _host_of(node)  # one node, many exporters: 10.0.0.5:9400 and 10.0.0.5:8000 are one machine
        device: int | None = None
        if self.spec.device is not None and (raw := labels.get(self.spec.device)) is not None:
            if not raw.isdigit() or len(raw) > 4:
                return Unplaced("bad_device")
            device = int(raw)
        pool = next((labels[name] for name in self.spec.pool if labels.get(name)), None)
        model = (labels.get(self.spec.model) or None) if self.spec.model is not None else None
        if pool is None and model is not None:
            pool = pool_for_model(model)
        for what, name, labels_naming in (("node", node, self.spec.node), ("pool", pool, self.spec.pool)):
            if name is not None and not _NAME.fullmatch(name):
                return Unplaced(
                    "bad_name",
                    f"{what} name {name[:80]!r} does not match {NAME_PATTERN}: give the series a "
                    f"{labels_naming[0]!r} label that does (a relabel)",
                )
        return SeriesPlace(self.name, node, device, pool, model)


def _host_of(instance: str) -> str:
    """``10.0.0.5:9400`` → ``10.0.0.5``; ``[fd00::5]:9400`` → ``fd00::5``; a value without a port stays."""
    if instance.startswith("["):
        return instance[1 : instance.index("]")] if "]" in instance else instance
    host, sep, port = instance.rpartition(":")
    return host if sep and port.isdigit() and ":" not in host else instance


def family_of(name: str, families: frozenset[str]) -> str | None:
    """The family a series name belongs to among ``families``: ``vllm:e2e_request_latency_seconds_bucket`` →
    ``vllm:e2e_request_latency_seconds``; itself when it is one; ``None`` when none."""
    if name in families:
        return name
    for suffix in SAMPLE_SUFFIXES:
        if name.endswith(suffix) and (family := name[: -len(suffix)]) in families:
            return family
    return None


class SeriesMapping:
    """The compiled mapping: which source takes a series and where it lands."""

    def __init__(self, spec: MappingSpec) -> None:
        self.sources = tuple(Source(s) for s in spec.sources)
        self.by_name = {s.name: s for s in self.sources}

    @cached_property
    def _folded(self) -> dict[str, str]:
        """Every source's family by its lowercase spelling (the first source's, should two differ only in case)."""
        found: dict[str, str] = {}
        for source in self.sources:
            for family in sorted(source.families):
                found.setdefault(family.lower(), family)
        return found

    def spelt_as_mapped(self, series: Sequence[RemoteSeries]) -> list[RemoteSeries]:
        """``series`` with each name a family matches case-insensitively spelt as the mapping spells it:
        ``dcgm_fi_dev_gpu_util`` → ``DCGM_FI_DEV_GPU_UTIL``, ``VLLM:GENERATION_TOKENS_TOTAL`` →
        ``vllm:generation_tokens_total``. For OTLP, whose instrument names are case-insensitive (the OpenTelemetry
        Python SDK lowercases them); the whole mapping, not only DCGM's upper-case names, since a case-insensitive
        name matches any spelling. A name no family matches stays as it came."""
        spelt = []
        for one in series:
            name = one.labels.get("__name__", "")
            mapped = self._spelling(name)
            spelt.append(one if mapped == name else RemoteSeries({**one.labels, "__name__": mapped}, one.samples))
        return spelt

    def _spelling(self, name: str) -> str:
        lowered = name.lower()
        for suffix in ("", *SAMPLE_SUFFIXES):
            if lowered.endswith(suffix) and (family := self._folded.get(lowered[: len(lowered) - len(suffix)])):
                return family + suffix
        return name

    def source_of(self, labels: Mapping[str, str]) -> tuple[Source, str] | None:
        """The first source taking a series with ``labels`` (``__name__`` included), and the series' family."""
        name = labels.get("__name__", "")
        for source in self.sources:
            family = family_of(name, source.families)
            if family is not None and source.takes(family, labels):
                return source, family
        return None


def load_mapping(path: Path | None = None) -> SeriesMapping:
    """The mapping in ``path`` (YAML, or TOML by its ``.toml`` suffix); the shipped defaults when ``None``."""
    path = path or DEFAULT_MAPPING
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise MappingError(f"{path}: cannot be read ({exc.strerror})") from None
    return parse_mapping(text, name=str(path), toml=path.suffix == ".toml")


def parse_mapping(text: str, *, name: str = "mapping", toml: bool = False) -> SeriesMapping:
    raw: Any
    try:
        if toml:
            raw = tomllib.loads(text)
        else:
            import yaml  # the server's dependency; imported here so the agent's import of this room stays light

            raw = yaml.safe_load(text)
    except Exception as exc:  # a YAML or TOML syntax error, whichever parser raised it
        raise MappingError(f"{name}: not valid {'TOML' if toml else 'YAML'}: {exc}") from None
    try:
        return SeriesMapping(MappingSpec.model_validate(raw))
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors())
        raise MappingError(f"{name}: {problems}") from None

"""The agent's own metrics (``fleetpilot_agent_*``) on an explicit registry, served on its ``/metrics``."""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable, Iterator
from typing import Protocol

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

from inference_agent.serving.supervision.pools import RefusalReason
from wire.percentile import percentile

JITTER_BUCKETS = (0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5)
JITTER_WINDOW_TICKS = 1200  # 10 minutes at 500 ms


class EngineAbsences(Protocol):
    """What ``AgentTelemetry.watch_engine`` reads of an engine probe (``EngineScrapeProbe`` is one)."""

    pool: str
    url: str

    @property
    def kind(self) -> str: ...

    def absent(self) -> dict[str, str]: ...


class _EngineAbsenceCollector(Collector):
    """``fleetpilot_agent_engine_metric_absent``, read from the watched probes at scrape time."""

    def __init__(self) -> None:
        self._probes: list[EngineAbsences] = []
        self._lock = threading.Lock()

    def watch(self, probe: EngineAbsences) -> None:
        with self._lock:
            if all(p is not probe for p in self._probes):
                self._probes.append(probe)

    def unwatch(self, probe: EngineAbsences) -> None:
        with self._lock:
            self._probes = [p for p in self._probes if p is not probe]

    def watched(self) -> list[EngineAbsences]:
        with self._lock:
            return list(self._probes)

    def collect(self) -> Iterator[Metric]:
        family = GaugeMetricFamily(
            "fleetpilot_agent_engine_metric_absent",
            "1 for each catalog metric an engine's latest reading lacks, with the reason (an engine that does not "
            "expose it, a rate that needs a second scrape, no request finished in the window, a failed scrape).",
            labels=["pool", "engine", "endpoint", "metric", "reason"],
        )
        for probe in self.watched():
            for name, reason in sorted(probe.absent().items()):
                family.add_metric([probe.pool, str(probe.kind), probe.url, name, reason], 1.0)
        yield family


class _CounterRead(Collector):
    """A counter whose value is read at scrape time from what counts it (``name`` without ``_total``)."""

    def __init__(self, name: str, documentation: str, read: Callable[[], int]) -> None:
        self._name, self._documentation, self._read = name, documentation, read

    def collect(self) -> Iterator[Metric]:
        yield CounterMetricFamily(self._name, self._documentation, value=float(self._read()))


class AgentTelemetry:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.registry = registry
        self._engine_absences = _EngineAbsenceCollector()
        registry.register(self._engine_absences)
        self._register_sampling(registry)
        self._register_pushing(registry)
        self._register_node_state(registry)

    def _register_sampling(self, registry: CollectorRegistry) -> None:
        """The ticks: how many ran and were skipped, how late and how long each was, and the probes' errors."""
        self.ticks = Counter("fleetpilot_agent_ticks", "Sampling ticks run.", registry=registry)
        self.ticks_skipped = Counter(
            "fleetpilot_agent_ticks_skipped", "Ticks passed over because a tick overran its period.", registry=registry
        )
        self.tick_jitter = Histogram(
            "fleetpilot_agent_tick_jitter_seconds",
            "How late each tick started after its deadline.",
            buckets=JITTER_BUCKETS,
            registry=registry,
        )
        self._recent_jitter: deque[float] = deque(maxlen=JITTER_WINDOW_TICKS)
        self._jitter_lock = threading.Lock()
        Gauge(
            "fleetpilot_agent_tick_jitter_p99_seconds",
            f"99th percentile of tick lateness over the last {JITTER_WINDOW_TICKS} ticks (exact, unlike the buckets).",
            registry=registry,
        ).set_function(self.jitter_p99)
        self.tick_duration = Histogram(
            "fleetpilot_agent_tick_duration_seconds",
            "Time to read every probe and spool the samples of one tick.",
            buckets=JITTER_BUCKETS,
            registry=registry,
        )
        self.probe_errors = Counter(
            "fleetpilot_agent_probe_errors", "Readings that carried an error, by probe.", ["probe"], registry=registry
        )

    def _register_pushing(self, registry: CollectorRegistry) -> None:
        """The pushes to the collector by outcome, the samples they carried by outcome, and their round trips."""
        self.pushes = Counter(
            "fleetpilot_agent_pushes",
            "Pushes to the collector, by outcome (ok, failed, rejected; unexpected: a 200 that is no ingest answer; "
            "error: the agent's own).",
            ["outcome"],
            registry=registry,
        )
        self.pushed_samples = Counter(
            "fleetpilot_agent_pushed_samples",
            "Samples acknowledged by the collector, by outcome (accepted, duplicate; refused: left out alone, the "
            "rest of their batch stored; rejected: their whole batch refused, set aside in spool/rejected/).",
            ["outcome"],
            registry=registry,
        )
        self.push_latency = Histogram(
            "fleetpilot_agent_push_round_trip_seconds",
            "Round trip of each push that got an answer.",
            buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0),
            registry=registry,
        )
        for outcome in ("ok", "failed", "rejected", "unexpected", "error"):
            self.pushes.labels(outcome)
        for outcome in ("accepted", "duplicate", "refused", "rejected"):
            self.pushed_samples.labels(outcome)

    def _register_node_state(self, registry: CollectorRegistry) -> None:
        """Whether GPU metrics are read (or why not), and the desired states refused."""
        self.gpu_probe_up = Gauge(
            "fleetpilot_agent_gpu_probe_up",
            "1 when GPU metrics are being read; 0 when they are absent (see fleetpilot_agent_gpu_probe_info).",
            registry=registry,
        )
        self.gpu_probe_info = Gauge(
            "fleetpilot_agent_gpu_probe_info",
            "Which GPU probe runs, or why none does.",
            ["probe", "reason"],
            registry=registry,
        )
        self.desired_refused = Counter(
            "fleetpilot_agent_desired_refused",
            "Desired states refused as a whole, by reason (Malformed: a field with a bad value or more pools than "
            "allowed; TooManyReplicas: more than the node runs); once per state, the node keeping its last good one.",
            ["reason"],
            registry=registry,
        )
        for reason in RefusalReason:
            self.desired_refused.labels(reason.value)

    def observe_tick(self, lateness_s: float, skipped: int) -> None:
        self.ticks.inc()
        self.ticks_skipped.inc(skipped)
        self.tick_jitter.observe(lateness_s)
        with self._jitter_lock:
            self._recent_jitter.append(lateness_s)

    def jitter_p99(self) -> float:
        with self._jitter_lock:
            recent = list(self._recent_jitter)
        return percentile(recent, 99.0) if recent else float("nan")

    def watch_pusher(self, problem: Callable[[], str | None], since_progress_s: Callable[[], float]) -> None:
        """Gauges read at scrape time from the pusher: whether it is healthy, and since when nothing got through."""
        Gauge(
            "fleetpilot_agent_pusher_up",
            "1 while the pusher runs and pushes get through; 0 when it stopped or is stale (see /healthz).",
            registry=self.registry,
        ).set_function(lambda: 0.0 if problem() else 1.0)
        Gauge(
            "fleetpilot_agent_push_progress_age_seconds",
            "Seconds since a push last got through or found nothing to send.",
            registry=self.registry,
        ).set_function(since_progress_s)

    def watch_engine(self, probe: EngineAbsences) -> None:
        """Serve ``probe.absent()`` as ``fleetpilot_agent_engine_metric_absent{pool,engine,endpoint,metric,reason}``.

        Read at scrape time, so each scrape shows the reasons of the probe's latest read. Call once per probe (a
        replica's or an external endpoint's; watching one twice changes nothing) and ``unwatch_engine`` when it
        goes. ``endpoint`` is the scraped URL: it tells apart two replicas of one pool.
        """
        self._engine_absences.watch(probe)

    def unwatch_engine(self, probe: EngineAbsences) -> None:
        """Stop serving ``probe``'s absences (its replica stopped); a probe not watched is ignored."""
        self._engine_absences.unwatch(probe)

    def watched_engines(self) -> list[EngineAbsences]:
        """The engine probes whose absences are served now (the node's report says the same reasons)."""
        return self._engine_absences.watched()

    def watch_rejected(self, files: Callable[[], int], held: Callable[[], int], dropped: Callable[[], int]) -> None:
        """Gauges read at scrape time from ``spool/rejected/`` (``RejectedBatches``), and what its bound dropped."""
        Gauge(
            "fleetpilot_agent_rejected_batches_files",
            "Batches the collector refused as invalid, kept in spool/rejected/.",
            registry=self.registry,
        ).set_function(lambda: float(files()))
        Gauge(
            "fleetpilot_agent_rejected_batches_bytes",
            "Bytes of spool/rejected/ (at most spool_rejected_max_bytes).",
            registry=self.registry,
        ).set_function(lambda: float(held()))
        self.registry.register(
            _CounterRead(
                "fleetpilot_agent_rejected_batches_dropped",
                "Rejected batches removed from spool/rejected/ to keep it within its bounds (oldest first).",
                dropped,
            )
        )

    def watch_spool(self, pending: Callable[[], int], lost: Callable[[], int], corrupt: Callable[[], int]) -> None:
        """Gauges read at scrape time from the spool."""
        Gauge(
            "fleetpilot_agent_spool_pending_samples",
            "Samples spooled and not yet acknowledged.",
            registry=self.registry,
        ).set_function(lambda: float(pending()))
        Gauge(
            "fleetpilot_agent_spool_lost_samples",
            "Samples dropped because the spool hit its bound (since the agent started).",
            registry=self.registry,
        ).set_function(lambda: float(lost()))
        Gauge(
            "fleetpilot_agent_spool_corrupt_segments",
            "Spool segments found corrupt and moved aside (since the agent started).",
            registry=self.registry,
        ).set_function(lambda: float(corrupt()))

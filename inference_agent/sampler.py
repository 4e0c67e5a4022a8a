"""Every tick: read each probe, turn the readings into wire samples, and spool them before anything is pushed.

Probes that may block (an engine's HTTP endpoint) run in their own thread through ``BackgroundProbe`` and the tick
reads their last result, so a slow engine never delays the 500 ms tick.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence

from inference_agent.probes.base import GpuProbe, Probe, Reading
from inference_agent.spool import Spool
from inference_agent.telemetry import AgentTelemetry
from inference_agent.ticker import Ticker
from wire.samples import SampleJson, UnsequencedSampleJson

log = logging.getLogger(__name__)
ERROR_LOG_EVERY_S = 60.0


def wire_sample(reading: Reading, ts: float) -> UnsequencedSampleJson:
    """The wire form of a reading, without ``seq`` (the spool assigns it); a probe's error travels in ``extra``."""
    extra = dict(reading.extra)
    if reading.error is not None:
        extra["probe_error"] = reading.error
    return {"ts": ts, "device": reading.device, "pool": reading.pool, "metrics": dict(reading.metrics), "extra": extra}


def with_network_latency(readings: list[Reading], latency_s: float | None) -> list[Reading]:
    """Add the last push's round trip to the node-level reading (absent when no push has been answered lately)."""
    if latency_s is None:
        return readings
    out = [
        Reading({**r.metrics, "network_latency_seconds": latency_s}, None, None, r.extra, r.error)
        if r.device is None and r.pool is None
        else r
        for r in readings
    ]
    if not any(r.device is None and r.pool is None for r in out):
        out.append(Reading({"network_latency_seconds": latency_s}))
    return out


class BackgroundProbe:
    """Runs ``probe.read()`` every ``interval_s`` in its own thread; ``read()`` returns the latest result.

    A result older than ``stale_after_s`` is not passed off as current: ``read()`` then answers one reading per
    series with no metrics and the reason.
    """

    def __init__(
        self,
        probe: Probe,
        interval_s: float,
        *,
        stale_after_s: float | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.name = probe.name
        self._probe = probe
        self._interval_s = interval_s
        self._stale_after_s = stale_after_s if stale_after_s is not None else max(3 * interval_s, 5.0)
        self._clock = clock
        self._latest: tuple[float, list[Reading]] | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name=f"probe-{probe.name}", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        ticker = Ticker(self._interval_s, clock=self._clock, stop=self._stop)
        while ticker.next() is not None:
            try:
                readings = self._probe.read()
            except Exception as exc:  # a probe bug must not kill the agent; it is reported like any probe error
                log.exception("probe %s failed", self.name)
                readings = [Reading({}, error=f"{type(exc).__name__}: {exc}")]
            self._latest = (self._clock(), readings)

    def read(self) -> list[Reading]:
        latest = self._latest
        if latest is None:
            return []
        taken_at, readings = latest
        age = self._clock() - taken_at
        if age <= self._stale_after_s:
            return readings
        reason = f"{self.name}: last result is {age:.1f} s old"
        return [Reading({}, r.device, r.pool, error=reason) for r in readings]

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        self._probe.close()


class Sampler:
    """Reads the probes once per tick and appends the tick's samples to the spool."""

    def __init__(
        self,
        spool: Spool,
        telemetry: AgentTelemetry,
        *,
        gpu: GpuProbe | None,
        probes: Sequence[Probe],
        network_latency: Callable[[], float | None],
        wall_clock: Callable[[], float] = time.time,
        on_spooled: Callable[[], None] = lambda: None,
    ) -> None:
        self._spool = spool
        self._telemetry = telemetry
        self._gpu = gpu
        self._probes = list(probes)
        self._network_latency = network_latency
        self._wall_clock = wall_clock
        self._on_spooled = on_spooled
        self._last_error_log: dict[str, float] = {}

    def sample_once(self) -> list[SampleJson]:
        """One tick's samples, spooled (with their ``seq``) before this returns."""
        ts = self._wall_clock()
        readings: list[Reading] = []
        for probe in ([self._gpu] if self._gpu is not None else []) + self._probes:
            probe_readings = probe.read()
            self._note_errors(probe.name, probe_readings, ts)
            readings.extend(probe_readings)
        readings = with_network_latency(readings, self._network_latency())
        samples = self._spool.append([wire_sample(r, ts) for r in readings if r.metrics or r.error or r.extra])
        self._on_spooled()
        return samples

    def run(self, ticker: Ticker) -> None:
        while (tick := ticker.next()) is not None:
            started = time.perf_counter()
            self._telemetry.observe_tick(tick.lateness_s, tick.skipped)
            try:
                self.sample_once()
            except Exception:
                log.exception("tick %d failed; the next tick goes on", tick.index)
            self._telemetry.tick_duration.observe(time.perf_counter() - started)

    def _note_errors(self, probe: str, readings: list[Reading], now: float) -> None:
        errors = [r.error for r in readings if r.error]
        if not errors:
            return
        self._telemetry.probe_errors.labels(probe).inc(len(errors))
        if now - self._last_error_log.get(probe, float("-inf")) >= ERROR_LOG_EVERY_S:
            self._last_error_log[probe] = now
            log.warning("probe %s: %s", probe, "; ".join(errors[:5]))

"""The noisy-neighbour episode as it runs (the rules are ``demo.burst``'s): chat's SLO calibrated from what its
replicas reported in the warm-up, then globex's burst on every other day, grown while acme's chat answers stay
within that SLO and ended once the server has recorded the throttle and the latency alert.

acme's latencies are what the day's load sees of its answers (``RecordingSender`` around the replay's sender); the
throttle and the alert are what the server recorded (``demo.recorded.ServerRecord``)."""

from __future__ import annotations

import itertools
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import httpx

from demo.burst import NoisyEpisode, SloCalibration, burst_over, next_rps
from demo.recorded import ServerRecord, reported_p99s
from demo.timeline import clock
from replay.driver import Outcome, PlannedRequest, Sender
from replay.trace_load import TraceRequest
from wire.percentile import percentile_or_none

BURST_CONCURRENCY = 64  # the batch job's connections: past them a send is skipped, as a client pool would queue it
Out = Callable[[str], None]


class TenantLatencies:
    """The latencies of one tenant's answered (2xx) requests, by when they ended; thread-safe, the last 10,000."""

    def __init__(self, tenant: str, *, clock: Callable[[], float] = time.monotonic) -> None:
        self.tenant = tenant
        self._clock = clock
        self._lock = threading.Lock()
        self._ended: deque[tuple[float, float]] = deque(maxlen=10_000)

    def add(self, latency_s: float) -> None:
        with self._lock:
            self._ended.append((self._clock(), latency_s))

    def since(self, ts: float) -> list[float]:
        """The latencies of the answers that ended at ``ts`` (the same clock) or later."""
        with self._lock:
            return [latency for ended, latency in self._ended if ended >= ts]


@dataclass
class RecordingSender:
    """A ``Sender`` that notes the latency of each answered request of ``latencies.tenant``."""

    sender: Sender
    latencies: TenantLatencies

    def send(self, request: PlannedRequest) -> Outcome:
        outcome = self.sender.send(request)
        if request.tenant == self.latencies.tenant and outcome.status is not None and 200 <= outcome.status < 300:
            self.latencies.add(outcome.latency_s)
        return outcome


@dataclass(frozen=True)
class EpisodeContext:
    """What the episode runs against: the chat pool's name, the agents' serving URLs, the request sizes to cycle
    through, the server's record, the admin API, the day's start (monotonic and Unix) and its length."""

    pool: str
    servers: Sequence[str]
    sizes: Sequence[TraceRequest]
    record: ServerRecord
    api: httpx.Client
    day_started_mono: float
    day_started_unix: float
    lap_s: float


def calibrate_slo(ctx: EpisodeContext, calibration: SloCalibration, stop: threading.Event, out: Out) -> float | None:
    """At the warm-up's end, give the pool the SLO its replicas' reported p99s make (``PATCH /pools/NAME``, audited
    as any edit); None, and the configured SLO kept, when they reported nothing or the edit failed."""
    if stop.wait(max(0.0, ctx.day_started_mono + calibration.warm_up_end_s - time.monotonic())):
        return None
    start, end = (ctx.day_started_unix + s for s in (calibration.warm_up_start_s, calibration.warm_up_end_s))
    reported = reported_p99s(ctx.api, ctx.pool, start, end)
    slo_s = calibration.slo_seconds(reported)
    if slo_s is None:
        out(f"Calibration: {ctx.pool}'s replicas reported no p99 in the warm-up; its configured SLO stays")
        return None
    try:  # the pool's other SLO field (its attainment) as it is: only the latency is calibrated
        slo = ctx.api.get(f"/pools/{ctx.pool}").raise_for_status().json()["slo"] | {"latency_p99_seconds": slo_s}
        ctx.api.patch(f"/pools/{ctx.pool}", json={"slo": slo}).raise_for_status()
    except (httpx.HTTPError, ValueError, KeyError) as exc:
        out(f"Calibration: setting {ctx.pool}'s SLO failed ({exc}); its configured SLO stays")
        return None
    out(
        f"Calibration {clock(calibration.warm_up_end_s)}: {ctx.pool}'s worst reported p99 from "
        f"{clock(calibration.warm_up_start_s)} to {clock(calibration.warm_up_end_s)} was {max(reported):.2f} s on "
        f"this machine; its SLO is now {calibration.slo_factor:g} × that: {slo_s:g} s (PATCH /api/v1/pools/{ctx.pool})"
    )
    return slo_s


def run_episodes(
    ctx: EpisodeContext,
    episode: NoisyEpisode,
    sender: Sender,
    victim: TenantLatencies,
    slo_s: float,
    stop: threading.Event,
    out: Out,
) -> None:
    """Each day the episode bursts on, its burst at ``episode.start_s``, until ``stop``."""
    for lap in itertools.count():
        if not episode.bursts_on(lap):
            continue
        starts = ctx.day_started_mono + lap * ctx.lap_s + episode.start_s
        if stop.wait(max(0.0, starts - time.monotonic())):
            return
        run_burst(ctx, episode, sender, victim, slo_s, stop, out)


def run_burst(
    ctx: EpisodeContext,
    episode: NoisyEpisode,
    sender: Sender,
    victim: TenantLatencies,
    slo_s: float,
    stop: threading.Event,
    out: Out,
) -> None:
    """One burst, open-loop at its current rate (a slow answer never delays the next send), re-sized each step."""
    started, started_unix = time.monotonic(), time.time()
    rps, next_send, step_end, sent, held = episode.first_rps, started, started + episode.step_s, 0, False
    servers, sizes = itertools.cycle(ctx.servers), itertools.cycle(ctx.sizes)
    slots = threading.BoundedSemaphore(BURST_CONCURRENCY)
    workers = ThreadPoolExecutor(max_workers=BURST_CONCURRENCY, thread_name_prefix="burst")

    def send(request: PlannedRequest) -> None:
        try:
            sender.send(request)
        finally:
            slots.release()

    out(f"Load {_at(ctx, started)}: {episode.tenant} bursts into {ctx.pool}: {rps:g} requests/s to start with")
    try:
        while not stop.is_set():
            now = time.monotonic()
            throttled = ctx.record.throttled_since(started_unix, episode.tenant)
            alerted = ctx.record.latency_alert_since(started_unix, ctx.pool)
            if burst_over(now - started, episode, throttled=throttled, alerted=alerted):
                break
            if now >= step_end:
                latencies = victim.since(step_end - episode.step_s)
                grown = next_rps(episode, rps, latencies, slo_s)
                if grown != rps or not held:
                    said = _step_text(victim.tenant, ctx.pool, latencies, slo_s)
                    out(f"Load {_at(ctx, now)}: {said}; {episode.tenant} at {grown:g}/s")
                held = held or grown == rps
                rps, step_end = grown, step_end + episode.step_s
            if now >= next_send:
                next_send += 1.0 / rps
                if slots.acquire(blocking=False):
                    size = next(sizes)
                    request = PlannedRequest(
                        0.0, next(servers), episode.tenant, size.prompt_tokens, episode.generated_tokens
                    )
                    workers.submit(send, request)
                    sent += 1
            stop.wait(max(0.0, min(next_send, step_end) - time.monotonic()))
    finally:
        workers.shutdown(wait=False, cancel_futures=True)
    out(
        f"Load {_at(ctx, time.monotonic())}: {episode.tenant}'s burst ends ({sent} requests sent, "
        f"{time.monotonic() - started:.0f} s, last at {rps:g}/s)"
    )


def _step_text(tenant: str, pool: str, latencies: Sequence[float], slo_s: float) -> str:
    """acme's p99 over the step against the SLO: "acme's chat p99 3.2 s, over the 1.7-s SLO"."""
    p99 = percentile_or_none(latencies, 99)
    if p99 is None:
        return f"no {tenant} answer from {pool} in the step"
    return f"{tenant}'s {pool} p99 {p99:.3g} s, {'over' if p99 > slo_s else 'within'} the {slo_s:g}-s SLO"


def _at(ctx: EpisodeContext, mono: float) -> str:
    return clock(mono - ctx.day_started_mono)

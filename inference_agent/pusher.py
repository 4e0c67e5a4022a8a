"""The pusher: spooled samples to ``POST /api/v1/ingest``, in order, acknowledged only when the collector committed.

The samples go as the spool holds them (``wire.samples.SampleJson``), as JSON or, once the collector offers it in an
answer's ``Accept-Post``, in the compact encoding (``wire.columnar``: a third of the agent's CPU per push and of the
collector's per sample), and as JSON again after an answer without the offer (an older collector behind the same
address; a compact batch it refused, 422, goes again as JSON before anything is set aside); keep-alive HTTP and gzip
bodies; exponential
backoff with full jitter while the collector is away (honouring ``Retry-After``); the round trip of each answered
push becomes ``network_latency_seconds``. Each body carries the node's ``report`` (``wire.control.NodeReport``)
taken as it is sent, so a spool replayed after an outage sends old samples with the node's state now, its ``ts``
saying when it was taken; a node with nothing to report (no supervisor of its own) sends none. The ``desired`` state
of each answer is parsed once, here (``parse_ack``), and goes to the agent typed: a ``DesiredState``, or a
``MalformedDesired`` saying which field was bad (the samples are delivered all the same). A batch the collector
rejects as invalid (422) can never succeed: it is set aside in ``rejected/`` (``RejectedBatches``, bounded) with the
collector's reason, counted, and the pusher goes on. Each push sends the token as it is then
(``inference_agent.agent_token``: a rotated token file is read again), and a 401 re-reads the file.

Nothing a collector answers ends or stalls the pusher: a 200 whose body is not the ingest answer is logged, counted
(``outcome="unexpected"``) and its samples stay spooled for the next try; a ``Retry-After`` is believed up to
``max_retry_after_s``; any other error of a pass is logged and the loop goes on. ``problem()`` says when the pusher
has stopped or has not got anything through for ``5 × max_retry_after_s``; the agent's ``/healthz`` reports it.
"""

from __future__ import annotations

import json
import logging
import math
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

import httpx
from pydantic import TypeAdapter, ValidationError

from inference_agent.agent_token import AgentToken
from inference_agent.probes.base import GpuInfo
from inference_agent.push_body import offers_compact, push_body
from inference_agent.rejected_batches import RejectedBatches
from inference_agent.spool import Spool, SpoolBatch
from inference_agent.telemetry import AgentTelemetry
from wire import columnar
from wire.control import DesiredState, NodeReport
from wire.refusals import Refusal

log = logging.getLogger(__name__)
LATENCY_FRESH_FOR_S = 10.0
# /healthz turns 503 after this many of the longest waits the pusher believes without a push getting through:
# 5 × 60 s = 5 minutes, several retries past any one outage's Retry-After.
STALE_AFTER_RETRY_AFTERS = 5


class PushOutcome(StrEnum):
    PUSHED = "pushed"
    NOTHING = "nothing"
    FAILED = "failed"
    REJECTED = "rejected"


@dataclass(frozen=True)
class PushResult:
    outcome: PushOutcome
    samples: int = 0
    retry_after_s: float | None = None


@dataclass(frozen=True)
class MalformedDesired:
    """An answer's ``desired`` with a field the agent knows holding a bad value: what is wrong, by field path."""

    detail: str


@dataclass(frozen=True)
class Ack:
    """The collector's answer to a committed push (CONTRACT section 5)."""

    accepted: int
    duplicates: int
    desired: DesiredState | MalformedDesired
    refused: tuple[Refusal, ...] = ()  # samples the collector left out one by one: delivered, never resent


_REFUSALS = TypeAdapter(tuple[Refusal, ...])


class UnexpectedAnswer(ValueError):
    """A 200 whose body is not an ingest answer; the samples stay spooled."""


def parse_ack(body: bytes) -> Ack:
    """``{"accepted": 2, "duplicates": 0, "desired": {...}}`` → Ack; anything else raises UnexpectedAnswer."""
    try:
        answer = json.loads(body)
    except ValueError as exc:
        raise UnexpectedAnswer(f"not JSON: {body[:80]!r}") from exc
    if not isinstance(answer, dict):
        raise UnexpectedAnswer(f"not a JSON object: {body[:80]!r}")
    counts = {name: answer.get(name, 0) for name in ("accepted", "duplicates")}
    for name, count in counts.items():
        if isinstance(count, bool) or not isinstance(count, int) or count < 0:
            raise UnexpectedAnswer(f"{name} is {count!r}, not a count")
    desired = answer.get("desired") or {}  # nothing desired: the control plane's limits are lifted
    if not isinstance(desired, dict):
        raise UnexpectedAnswer(f"desired is a {type(desired).__name__}, not an object")
    try:
        refused = _REFUSALS.validate_python(answer.get("refused") or ())
    except ValidationError as exc:
        raise UnexpectedAnswer(f"refused is not a list of refusals: {describe(exc)}") from None
    try:  # fields a newer server added are dropped (extra="ignore"); a known one with a bad value is an error
        return Ack(counts["accepted"], counts["duplicates"], DesiredState.model_validate(desired), refused)
    except ValidationError as exc:
        return Ack(counts["accepted"], counts["duplicates"], MalformedDesired(describe(exc)), refused)


def describe(exc: ValidationError, most: int = 5) -> str:
    """Pydantic's errors as ``field.path: what is wrong``: "pools.chat.replicas: Input should be greater than or
    equal to 0"; past ``most`` errors, how many more (a state can be 9 MB of keys, each one wrong)."""
    errors = exc.errors(include_url=False)
    lines = [f"{'.'.join(map(str, e['loc'])) or 'desired'}: {e['msg']}" for e in errors[:most]]
    if len(errors) > most:
        lines.append(f"and {len(errors) - most} more")
    return "; ".join(lines)


def retry_after_s(value: str | None, *, cap_s: float) -> float | None:
    """The wait a ``Retry-After`` asks for, believed up to ``cap_s``: "7" → 7 s; "1e9" or "inf" → the cap (60 s).

    One that is present but not a finite number of seconds from 0 up ("nan", "-3", an HTTP-date, which our
    collector never sends) also counts as the cap: the collector asked for a pause, and the cap bounds it.
    """
    if value is None:
        return None
    try:
        seconds = float(value)
    except ValueError:
        return cap_s
    return seconds if math.isfinite(seconds) and 0 <= seconds <= cap_s else cap_s


def pusher_problem(*, ran: bool, running: bool, since_progress_s: float, stale_after_s: float) -> str | None:
    """Why the pusher is unhealthy, or None: its loop ended, or nothing got through for ``stale_after_s``."""
    if ran and not running:
        return "the pusher has stopped: samples are spooled but no longer sent"
    if since_progress_s > stale_after_s:
        return f"no push got through for {since_progress_s:.0f} s (more than {stale_after_s:.0f} s)"
    return None


def backoff_delay(failures: int, *, base_s: float = 0.5, cap_s: float = 30.0, rng: random.Random) -> float:
    """Full jitter: uniform in [0, min(cap, base × 2^(failures−1))] — 4 failures → up to 4 s."""
    ceiling = min(cap_s, base_s * 2 ** max(0, failures - 1))
    return rng.uniform(0.0, ceiling)


def inventory_body(hostname: str, agent_version: str, gpus: list[GpuInfo]) -> dict[str, Any]:
    return {
        "hostname": hostname,
        "agent_version": agent_version,
        "gpus": [vars(g) for g in gpus],
    }


class Pusher:
    def __init__(
        self,
        spool: Spool,
        client: httpx.Client,
        telemetry: AgentTelemetry,
        *,
        node_id: str,
        token: AgentToken,
        inventory: dict[str, Any] | None,
        on_desired: Callable[[DesiredState | MalformedDesired], None] = lambda _d: None,
        report: Callable[[float], NodeReport | None] = lambda _ts: None,
        wall_clock: Callable[[], float] = time.time,
        max_batch: int = 2000,
        rejected: RejectedBatches,
        max_retry_after_s: float = 60.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._spool = spool
        self._client = client
        self._telemetry = telemetry
        self._node_id = node_id
        self._token = token
        self._compact = False  # the collector offered the compact encoding in its last answer
        self._inventory = inventory
        self._on_desired = on_desired
        self._report = report
        self._wall_clock = wall_clock
        self._report_failing = False
        self._refusals_logged: set[tuple[str, tuple[str, ...]]] = set()
        self._max_batch = max_batch
        self._rejected = rejected
        telemetry.watch_rejected(lambda: rejected.files, lambda: rejected.bytes, lambda: rejected.dropped)
        self._max_retry_after_s = max_retry_after_s
        self._clock = clock
        self._latency: tuple[float, float] | None = None  # (measured at, seconds)
        self._progress_at = clock()  # when a push last got through or found nothing to send
        self._ran = False
        self._running = False

    def problem(self) -> str | None:
        """Why the pusher is unhealthy now (for ``/healthz``), or None."""
        return pusher_problem(
            ran=self._ran,
            running=self._running,
            since_progress_s=self.since_progress_s(),
            stale_after_s=STALE_AFTER_RETRY_AFTERS * self._max_retry_after_s,
        )

    def since_progress_s(self) -> float:
        return self._clock() - self._progress_at

    def network_latency(self) -> float | None:
        """The last answered push's round trip, while it is recent enough to describe the network now."""
        latency = self._latency
        if latency is None or self._clock() - latency[0] > LATENCY_FRESH_FOR_S:
            return None
        return latency[1]

    def push_once(self) -> PushResult:
        result = self._push()
        if result.outcome is not PushOutcome.FAILED:
            self._progress_at = self._clock()
        return result

    def _push(self) -> PushResult:
        batch = self._spool.read(self._max_batch)
        if batch is None:
            return PushResult(PushOutcome.NOTHING)
        report = self._report_now()
        content_type, payload = self._body(
            batch, None if report is None else report.model_dump(mode="json", exclude_none=True)
        )
        started = time.perf_counter()
        try:
            headers = {
                "Content-Type": content_type,
                "Content-Encoding": "gzip",
                "Authorization": f"Bearer {self._token.current()}",
            }
            answer = self._client.post("/api/v1/ingest", content=payload, headers=headers)
        except httpx.HTTPError as exc:
            log.debug("push of %d samples failed: %s", len(batch.samples), exc)
            self._telemetry.pushes.labels("failed").inc()
            return PushResult(PushOutcome.FAILED)
        round_trip = time.perf_counter() - started
        self._compact = offers_compact(answer)
        self._latency = (self._clock(), round_trip)
        self._telemetry.push_latency.observe(round_trip)
        if answer.status_code == 422 and content_type == columnar.MEDIA_TYPE:
            # an older collector behind the same address read it as JSON; the batch goes again as JSON, refused
            # there with the collector's reason if it is bad
            log.info("collector refused a compact batch (422); sending it as JSON")
            self._compact = False
            return PushResult(PushOutcome.FAILED)
        return self._handle(answer, batch)

    def _body(self, batch: SpoolBatch, report: dict[str, Any] | None) -> tuple[str, bytes]:
        return push_body(self._node_id, batch.samples, report=report, inventory=self._inventory, compact=self._compact)

    def _report_now(self) -> NodeReport | None:
        """The node's report as of now; one that cannot be built is logged (once until it can) and left out, so the
        samples still go."""
        try:
            report = self._report(self._wall_clock())
        except Exception:
            if not self._report_failing:
                log.exception("the node's report could not be built; pushing without it")
            self._report_failing = True
            return None
        self._report_failing = False
        return report

    def _handle(self, answer: httpx.Response, batch: SpoolBatch) -> PushResult:
        if answer.status_code == 200:
            return self._acknowledged(answer, batch)
        if answer.status_code == 413 and self._max_batch > 1:
            self._max_batch = max(1, self._max_batch // 2)
            log.warning("collector refused a batch as too large; pushing at most %d samples", self._max_batch)
            return PushResult(PushOutcome.FAILED)
        if answer.status_code in (413, 422):
            return self._reject(answer, batch)
        self._telemetry.pushes.labels("failed").inc()
        if answer.status_code == 401:
            self._token.reread()  # a rotated token file whose change the stat did not show
        if answer.status_code in (401, 403):
            log.error("collector refused the token (%d): %s; samples stay spooled", answer.status_code, answer.text)
        else:
            log.warning("collector answered %d; samples stay spooled", answer.status_code)
        retry_after = retry_after_s(answer.headers.get("retry-after"), cap_s=self._max_retry_after_s)
        return PushResult(PushOutcome.FAILED, retry_after_s=retry_after)

    def _acknowledged(self, answer: httpx.Response, batch: SpoolBatch) -> PushResult:
        try:
            ack = parse_ack(answer.content)
        except UnexpectedAnswer as exc:
            # resent later: if the collector did commit them, the resend counts as duplicates, nothing is lost
            log.error("collector answered 200 with %s; %d samples stay spooled", exc, len(batch.samples))
            self._telemetry.pushes.labels("unexpected").inc()
            return PushResult(PushOutcome.FAILED)
        self._spool.ack(batch)
        self._inventory = None  # registered: the collector has it now
        self._telemetry.pushes.labels("ok").inc()
        self._telemetry.pushed_samples.labels("accepted").inc(ack.accepted)
        self._telemetry.pushed_samples.labels("duplicate").inc(ack.duplicates)
        self._note_refused(ack.refused)
        try:
            self._on_desired(ack.desired)
        except Exception:  # the samples are delivered; a workload that cannot take the state says so in its log
            log.exception("the desired state could not be applied")
        return PushResult(PushOutcome.PUSHED, samples=len(batch.samples))

    def _note_refused(self, refused: tuple[Refusal, ...]) -> None:
        """Count the samples the collector left out alone; log each kind once until it changes (a node with 65 pools
        is refused the same pool every push, once a second)."""
        self._telemetry.pushed_samples.labels("refused").inc(sum(r.samples for r in refused))
        kinds = {(r.reason, tuple(r.pools)) for r in refused}
        for refusal in refused:
            if (refusal.reason, tuple(refusal.pools)) not in self._refusals_logged:
                log.warning("collector refused %d samples (%s): %s", refusal.samples, refusal.reason, refusal.detail)
        self._refusals_logged = kinds

    def _reject(self, answer: httpx.Response, batch: SpoolBatch) -> PushResult:
        path = self._rejected.keep(
            batch.samples[0]["seq"],
            batch.last_seq,
            status=answer.status_code,
            answer=answer.text,
            samples=batch.samples,
        )
        self._spool.ack(batch)
        self._telemetry.pushes.labels("rejected").inc()
        self._telemetry.pushed_samples.labels("rejected").inc(len(batch.samples))
        log.error(
            "collector rejected %d samples (%d: %s); set aside in %s",
            len(batch.samples),
            answer.status_code,
            answer.text[:500],
            path,
        )
        return PushResult(PushOutcome.REJECTED, samples=len(batch.samples))

    def run(self, stop: threading.Event, *, interval_s: float, seed: int | None = None) -> None:
        """Push until ``stop``: at most every ``interval_s`` once caught up, backing off while pushes fail."""
        rng = random.Random(seed)
        failures = 0
        self._ran = self._running = True
        try:
            while not stop.is_set():
                result = self._push_guarded()
                failures = failures + 1 if result.outcome is PushOutcome.FAILED else 0
                stop.wait(self._pause_s(result, failures, interval_s, rng))
        finally:
            self._running = False

    def _push_guarded(self) -> PushResult:
        """One push; an error of ours (a full disk, a bug) is logged and retried like a failed push."""
        try:
            return self.push_once()
        except Exception:
            log.exception("push failed; samples stay spooled")
            self._telemetry.pushes.labels("error").inc()
            return PushResult(PushOutcome.FAILED)

    def _pause_s(self, result: PushResult, failures: int, interval_s: float, rng: random.Random) -> float:
        if result.outcome is PushOutcome.FAILED:
            return max(backoff_delay(failures, rng=rng), result.retry_after_s or 0.0)
        if result.outcome is PushOutcome.NOTHING or result.samples < self._max_batch:
            return interval_s  # caught up: let an interval's ticks gather (1 s at 500 ms ticks → 2 ticks)
        return 0.0  # a full batch: more is waiting (a replay after an outage), push on at once

    def flush(self, deadline_s: float) -> int:
        """At shutdown: push what is spooled until nothing is left or ``deadline_s`` passes; returns samples left."""
        end = self._clock() + deadline_s
        while self._clock() < end:
            result = self._push_guarded()
            if result.outcome in (PushOutcome.NOTHING, PushOutcome.FAILED):
                break
        return self._spool.pending

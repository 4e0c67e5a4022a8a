"""``fleetpilot replay``: drive a trace at the serving front end of one or more agents (CONTRACT section 11).

Two trace formats are read, those shipped under ``data/traces/``: a request trace (``TIMESTAMP,ContextTokens,
GeneratedTokens``, one row per request, read by ``replay.trace_load``) and a demand series (``timestamp,value``,
requests per step, read by ``predictor.series_csv``; each step's requests are spread evenly over the step).
Scheduling is pure (``schedule``: arrival times, speed, duration, loop, round-robin over servers and tenants) and
apart from sending, which goes through a narrow ``Sender``; ``run_replay`` paces the plan open-loop on a clock, and
``summarize`` turns the outcomes into the summary the command prints.
"""

from __future__ import annotations

import csv
import math
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Protocol

import httpx

from replay.trace_load import MAX_GENERATED_TOKENS, MAX_PROMPT_TOKENS, TOKEN_SCALE, TraceRequest, load_trace
from wire.percentile import percentile_or_none

REQUEST_TRACE_HEADER = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")
CLASSIFY_IMAGE_SHAPE = (3, 64, 64)  # what the built-in classifier takes (inference_agent.serving.frontend.schema)


class ReplayError(ValueError):
    """A trace or an option the replay cannot use; the message names the file or the option."""


class Endpoint(StrEnum):
    COMPLETIONS = "completions"
    CLASSIFY = "classify"


@dataclass(frozen=True)
class ReplayOptions:
    """How to play a trace: ``speed`` 10 plays 10 s of trace a second; ``duration_s`` cuts the replay (with
    ``loop``, the trace is played again until then); servers and tenants are taken in turn."""

    servers: tuple[str, ...]
    pool: str
    tenants: tuple[str, ...] = ("default",)
    endpoint: Endpoint = Endpoint.COMPLETIONS
    speed: float = 1.0
    duration_s: float | None = None
    loop: bool = False
    limit: int | None = None

    def __post_init__(self) -> None:
        if not self.servers or not self.tenants:
            raise ReplayError("--server and --tenant need at least one value each")
        if not (self.speed > 0 and math.isfinite(self.speed)):
            raise ReplayError(f"--speed must be a positive number, not {self.speed}")
        if self.duration_s is not None and not self.duration_s > 0:
            raise ReplayError(f"--duration must be positive, not {self.duration_s}")
        if self.loop and self.duration_s is None and self.limit is None:
            raise ReplayError("--loop needs --duration or --limit (it would never end)")


@dataclass(frozen=True)
class PlannedRequest:
    """One request of the plan: when (seconds from the start of the replay), where, as whom, and its size."""

    at_s: float
    server: str
    tenant: str
    prompt_tokens: int
    max_tokens: int


def read_trace(
    path: Path, *, scale_tokens: float = TOKEN_SCALE, series_tokens: tuple[int, int] = (64, 32)
) -> list[TraceRequest]:
    """The trace's requests from the first one at 0 s, token counts divided by ``scale_tokens``; a demand series
    becomes requests of ``series_tokens`` (prompt, generated) tokens spread over each step."""
    if not path.is_file():
        raise ReplayError(f"{path}: no such trace file")
    if not scale_tokens > 0:
        raise ReplayError(f"--scale-tokens must be positive, not {scale_tokens}")
    with path.open(newline="") as handle:
        header = tuple(next(csv.reader(handle), ()))
    if header[:3] == REQUEST_TRACE_HEADER:
        return _request_trace(path, scale_tokens)
    return _series_trace(path, *series_tokens)


def _request_trace(path: Path, scale_tokens: float) -> list[TraceRequest]:
    """Arrival times through ``load_trace``; token counts read again from the file, so any ``scale_tokens`` is
    exact: 374 context tokens ÷ 16 → 23 prompt tokens, capped as ``load_trace`` caps them."""
    try:
        trace = load_trace(path, limit=sys.maxsize, compression=1.0)
        with path.open(newline="") as handle:
            tokens = [(int(row["ContextTokens"]), int(row["GeneratedTokens"])) for row in csv.DictReader(handle)]
    except (ValueError, KeyError, IndexError, TypeError) as exc:
        raise ReplayError(f"{path}: not a readable request trace: {exc!r}") from exc
    return [
        TraceRequest(
            arrival_s=request.arrival_s,
            prompt_tokens=min(max(int(context // scale_tokens), 1), MAX_PROMPT_TOKENS),
            generated_tokens=min(max(int(generated // scale_tokens), 1), MAX_GENERATED_TOKENS),
        )
        for request, (context, generated) in zip(trace, tokens, strict=True)
    ]


def _series_trace(path: Path, prompt_tokens: int, generated_tokens: int) -> list[TraceRequest]:
    from predictor.series_csv import SeriesCsvError, read_series_csv

    try:
        history = read_series_csv(path).history
    except SeriesCsvError as exc:
        raise ReplayError(str(exc)) from exc
    counts = [0.0 if math.isnan(v) else float(v) for v in history.values]
    return arrivals_from_series(counts, history.step_seconds, prompt_tokens, generated_tokens)


def arrivals_from_series(
    counts: Sequence[float], step_s: float, prompt_tokens: int, generated_tokens: int
) -> list[TraceRequest]:
    """Requests per step → arrivals spread evenly within each step; fractions carry to the next step, so 0.5
    requests a step give one request every other step (a missing step counts 0: no requests, not an error)."""
    arrivals: list[TraceRequest] = []
    carried = 0.0
    for step, count in enumerate(counts):
        carried += max(count, 0.0)
        whole = math.floor(carried + 1e-9)
        carried -= whole
        for i in range(whole):
            arrival_s = step * step_s + (i + 0.5) * step_s / whole
            arrivals.append(TraceRequest(arrival_s, prompt_tokens, generated_tokens))
    return arrivals


def schedule(trace: Sequence[TraceRequest], options: ReplayOptions) -> list[PlannedRequest]:
    """The plan: each request at ``arrival / speed``, looped with a period of the trace's span plus one mean gap
    (600 requests over 148 s → a 148.25 s period), cut at ``duration_s`` and ``limit``."""
    if not trace:
        return []
    span_s = trace[-1].arrival_s
    period_s = span_s + span_s / max(len(trace) - 1, 1) if span_s > 0 else 1.0
    plan: list[PlannedRequest] = []
    for lap in range(sys.maxsize if options.loop else 1):
        for request in trace:
            at_s = (lap * period_s + request.arrival_s) / options.speed
            if _past_end(at_s, len(plan), options):
                return plan
            turn = len(plan)
            plan.append(
                PlannedRequest(
                    at_s=at_s,
                    server=options.servers[turn % len(options.servers)],
                    tenant=options.tenants[turn % len(options.tenants)],
                    prompt_tokens=request.prompt_tokens,
                    max_tokens=request.generated_tokens,
                )
            )
    return plan


def _past_end(at_s: float, planned: int, options: ReplayOptions) -> bool:
    return (options.duration_s is not None and at_s >= options.duration_s) or (
        options.limit is not None and planned >= options.limit
    )


@dataclass(frozen=True)
class Outcome:
    """What one request got: the HTTP status (None when no answer came) and how long it took."""

    status: int | None
    latency_s: float
    error: str | None = None


class Sender(Protocol):
    """Sends one planned request and says what came back; must be callable from several threads at once."""

    def send(self, request: PlannedRequest) -> Outcome: ...


FILLER = "The quick brown fox jumps over the lazy dog. "


class HttpSender:
    """Sends to the serving API over one keep-alive ``httpx.Client`` (thread-safe). A tenant with a key in
    ``tenant_keys`` sends ``Authorization: Bearer <key>`` (what the agents check); every request also names its tenant
    in ``X-Tenant``, which only a gateway the agents trust may pass on. ``token`` is a bearer token for such a gateway,
    sent by the tenants without a key of their own."""

    def __init__(
        self,
        pool: str,
        endpoint: Endpoint,
        *,
        token: str | None = None,
        tenant_keys: Mapping[str, str] | None = None,
        timeout_s: float = 120.0,
    ) -> None:
        self.pool, self.endpoint = pool, endpoint
        self.tenant_keys = dict(tenant_keys or {})
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        limits = httpx.Limits(max_connections=256, max_keepalive_connections=256)
        self._client = httpx.Client(timeout=timeout_s, headers=headers, limits=limits)
        side = CLASSIFY_IMAGE_SHAPE[1]
        self._image = [[[0.5] * side for _ in range(side)] for _ in range(CLASSIFY_IMAGE_SHAPE[0])]

    def body(self, request: PlannedRequest) -> dict[str, object]:
        if self.endpoint is Endpoint.CLASSIFY:
            return {"model": self.pool, "inputs": [self._image]}
        # byte-level tokens plus BOS make prompt_tokens (trace_load.TraceRequest.prompt does the same)
        prompt = (FILLER * (request.prompt_tokens // len(FILLER) + 1))[: max(request.prompt_tokens - 1, 1)]
        return {"model": self.pool, "prompt": prompt, "max_tokens": request.max_tokens}

    def headers(self, tenant: str) -> dict[str, str]:
        key = self.tenant_keys.get(tenant)
        return {"X-Tenant": tenant, **({"Authorization": f"Bearer {key}"} if key else {})}

    def send(self, request: PlannedRequest) -> Outcome:
        url = f"{request.server.rstrip('/')}/v1/{self.endpoint.value}"
        started = time.perf_counter()
        try:
            answer = self._client.post(url, json=self.body(request), headers=self.headers(request.tenant))
        except httpx.HTTPError as exc:
            return Outcome(None, time.perf_counter() - started, f"{type(exc).__name__}: {exc}")
        return Outcome(answer.status_code, time.perf_counter() - started)

    def close(self) -> None:
        self._client.close()


@dataclass
class ReplayResult:
    """The outcomes in plan order (None: never sent, the replay was interrupted) and the wall time taken."""

    outcomes: list[Outcome | None]
    wall_s: float
    interrupted: bool = False
    answered: int = 0


Progress = Callable[[int, int], None]


def run_replay(
    plan: Sequence[PlannedRequest],
    sender: Sender,
    *,
    concurrency: int = 64,
    on_progress: Progress = lambda done, total: None,
    clock: Callable[[], float] = time.monotonic,
    stop: threading.Event | None = None,
) -> ReplayResult:
    """Send each request at its time, open-loop (a slow answer never delays the next send, up to ``concurrency``
    in flight); ``stop`` (or Ctrl-C) ends sending early and waits for the requests in flight."""
    stop = stop or threading.Event()
    result = ReplayResult([None] * len(plan), 0.0)
    started = clock()
    pending: set[Future[None]] = set()
    with ThreadPoolExecutor(max_workers=max(1, concurrency), thread_name_prefix="replay") as workers:
        try:
            for index, request in enumerate(plan):
                while not stop.is_set() and (delay := started + request.at_s - clock()) > 0:
                    if pending:
                        _settle(pending, min(delay, 0.2), result, on_progress, len(plan))
                    else:
                        stop.wait(min(delay, 0.2))
                if stop.is_set():
                    result.interrupted = True
                    break
                pending.add(workers.submit(_send_into, sender, request, result, index))
            while pending:
                _settle(pending, 0.2, result, on_progress, len(plan))
        except KeyboardInterrupt:
            result.interrupted = True
            wait(pending)
    result.wall_s = clock() - started
    on_progress(result.answered, len(plan))
    return result


def _send_into(sender: Sender, request: PlannedRequest, result: ReplayResult, index: int) -> None:
    result.outcomes[index] = sender.send(request)


def _settle(
    pending: set[Future[None]], timeout_s: float, result: ReplayResult, on_progress: Progress, total: int
) -> None:
    """Wait up to ``timeout_s`` for answers, drop the finished futures, and report progress."""
    done, _ = wait(pending, timeout=timeout_s, return_when=FIRST_COMPLETED)
    pending.difference_update(done)
    for future in done:
        future.result()  # a sender bug surfaces here rather than vanishing
        result.answered += 1
    on_progress(result.answered, total)


@dataclass(frozen=True)
class ReplaySummary:
    """What the command prints at the end. Latency percentiles are over 2xx answers; None when there was none."""

    planned: int
    sent: int
    ok: int
    rate_limited: int  # 429: over the tenant's quota
    unavailable: int  # 503: overloaded or draining
    errors: int  # any other status, or no answer at all
    error_kinds: dict[str, int]  # "500": 2, "ConnectError": 3
    latency_p50_ms: float | None
    latency_p99_ms: float | None
    achieved_rps: float
    offered_rps: float
    wall_s: float
    interrupted: bool

    def lines(self) -> list[str]:
        def ms(value: float | None) -> str:
            return "n/a" if value is None else f"{value:.1f} ms"

        return [
            f"sent {self.sent} of {self.planned} planned requests in {self.wall_s:.1f} s"
            + (" (interrupted)" if self.interrupted else ""),
            f"ok {self.ok}, 429 {self.rate_limited}, 503 {self.unavailable}, errors {self.errors}"
            + (f" ({', '.join(f'{kind} {n}' for kind, n in self.error_kinds.items())})" if self.errors else ""),
            f"latency of ok answers: p50 {ms(self.latency_p50_ms)}, p99 {ms(self.latency_p99_ms)}",
            f"achieved rate {self.achieved_rps:.2f} requests/s (offered {self.offered_rps:.2f})",
        ]


def summarize(plan: Sequence[PlannedRequest], result: ReplayResult) -> ReplaySummary:
    """Counts by answer, p50/p99 (nearest rank) of the ok answers, and the rates: achieved = sent / wall time,
    offered = planned / the plan's span (600 requests planned over 148 s → 4.05/s)."""
    sent = [o for o in result.outcomes if o is not None]
    statuses = [o.status for o in sent]
    ok_ms = sorted(o.latency_s * 1000.0 for o in sent if o.status is not None and 200 <= o.status < 300)
    span_s = plan[-1].at_s if plan else 0.0
    return ReplaySummary(
        planned=len(plan),
        sent=len(sent),
        ok=len(ok_ms),
        rate_limited=statuses.count(429),
        unavailable=statuses.count(503),
        errors=len(sent) - len(ok_ms) - statuses.count(429) - statuses.count(503),
        error_kinds=dict(Counter(kind for kind in map(_error_kind, sent) if kind is not None)),
        latency_p50_ms=_percentile_ms(ok_ms, 50),
        latency_p99_ms=_percentile_ms(ok_ms, 99),
        achieved_rps=len(sent) / result.wall_s if result.wall_s > 0 else 0.0,
        offered_rps=len(plan) / span_s if span_s > 0 else 0.0,
        wall_s=result.wall_s,
        interrupted=result.interrupted,
    )


def _percentile_ms(values: Sequence[float], q: float) -> float | None:
    """The nearest-rank percentile (``q`` in percent) to 0.01 ms; None without a value."""
    found = percentile_or_none(values, q)
    return None if found is None else round(found, 2)


def _error_kind(outcome: Outcome) -> str | None:
    """An outcome's error class: its status when it is neither 2xx, 429 nor 503; the exception's name without one."""
    if outcome.status is None:
        return (outcome.error or "no answer").split(":", 1)[0]
    if 200 <= outcome.status < 300 or outcome.status in (429, 503):
        return None
    return str(outcome.status)

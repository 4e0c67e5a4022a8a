"""``fleetpilot replay``: pure scheduling and summary, the shipped trace formats, and real HTTP on loopback — a small
serving stand-in (``ThreadingHTTPServer``) that answers by tenant: ``over`` gets 429, ``busy`` 503, ``boom`` 500."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from fleetpilot.cli import main
from inference_agent.ports import free_port
from replay.driver import (
    Endpoint,
    HttpSender,
    Outcome,
    PlannedRequest,
    ReplayError,
    ReplayOptions,
    ReplayResult,
    arrivals_from_series,
    read_trace,
    run_replay,
    schedule,
    summarize,
)
from replay.trace_load import AZURE_CONV_SLICE, TraceRequest, load_trace

SERIES = AZURE_CONV_SLICE.parent / "series" / "azure_conv_requests_per_minute.csv"
STATUS_BY_TENANT = {"over": 429, "busy": 503, "boom": 500}


@dataclass
class Seen:
    requests: list[tuple[str, str, dict[str, Any], str | None]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)


@pytest.fixture
def serving() -> Iterator[tuple[str, Seen]]:
    """A loopback HTTP server shaped like an agent's serving API (CONTRACT section 11)."""
    seen = Seen()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            tenant = self.headers.get("X-Tenant", "default")
            with seen.lock:
                seen.requests.append((self.path, tenant, body, self.headers.get("Authorization")))
            status = STATUS_BY_TENANT.get(tenant, 200)
            answer = {"usage": {"prompt_tokens": 1, "completion_tokens": body.get("max_tokens", 1)}}
            payload = json.dumps(answer if status == 200 else {"detail": "no"}).encode()
            self.send_response(status)
            if status == 429:
                self.send_header("Retry-After", "1")
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def log_message(self, *_args: object) -> None:
            pass

    class Server(ThreadingHTTPServer):
        request_queue_size = 256  # the default 5 overflows at a few hundred new connections a second
        daemon_threads = True

    server = Server(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}", seen
    server.shutdown()
    server.server_close()


def trace_of(arrivals: list[float]) -> list[TraceRequest]:
    return [TraceRequest(a, 10, 4) for a in arrivals]


@pytest.mark.parametrize(
    ("counts", "expected"),
    [
        ([2.0], [15.0, 45.0]),  # two requests in a 60 s step: at the middle of each half
        ([0.5, 0.5, 0.5, 0.5], [90.0, 210.0]),  # half a request a step: one every other step
        ([1.0, float("0"), 1.0], [30.0, 150.0]),  # an empty step sends nothing
        ([-3.0, 1.0], [90.0]),  # a negative count is no requests, not a debt
    ],
)
def test_series_counts_become_evenly_spread_arrivals(counts: list[float], expected: list[float]) -> None:
    arrivals = arrivals_from_series(counts, 60.0, 64, 32)
    assert [a.arrival_s for a in arrivals] == pytest.approx(expected)
    assert all((a.prompt_tokens, a.generated_tokens) == (64, 32) for a in arrivals)


def test_schedule_compresses_time_and_takes_servers_and_tenants_in_turn() -> None:
    options = ReplayOptions(servers=("http://a", "http://b"), pool="chat", tenants=("x", "y", "z"), speed=4.0)
    plan = schedule(trace_of([0.0, 4.0, 8.0, 12.0]), options)
    assert [p.at_s for p in plan] == [0.0, 1.0, 2.0, 3.0]
    assert [p.server for p in plan] == ["http://a", "http://b", "http://a", "http://b"]
    assert [p.tenant for p in plan] == ["x", "y", "z", "x"]


def test_schedule_cuts_at_the_duration_and_loops_with_the_trace_period() -> None:
    trace = trace_of([0.0, 10.0, 20.0])  # span 20 s, mean gap 10 s → a 30 s period
    once = schedule(trace, ReplayOptions(servers=("s",), pool="p", duration_s=15.0))
    assert [p.at_s for p in once] == [0.0, 10.0]
    looped = schedule(trace, ReplayOptions(servers=("s",), pool="p", duration_s=65.0, loop=True))
    assert [p.at_s for p in looped] == [0.0, 10.0, 20.0, 30.0, 40.0, 50.0, 60.0]
    limited = schedule(trace, ReplayOptions(servers=("s",), pool="p", loop=True, limit=5))
    assert len(limited) == 5


@pytest.mark.parametrize(
    ("options", "field_named"),
    [
        ({"speed": 0.0}, "--speed"),
        ({"speed": float("inf")}, "--speed"),
        ({"duration_s": -1.0}, "--duration"),
        ({"loop": True}, "--loop"),
        ({"tenants": ()}, "--tenant"),
    ],
)
def test_bad_options_name_the_option(options: dict[str, Any], field_named: str) -> None:
    with pytest.raises(ReplayError, match=field_named):
        ReplayOptions(servers=("s",), pool="p", **options)


def test_summary_counts_each_answer_kind_and_takes_percentiles_of_ok_answers() -> None:
    plan = [PlannedRequest(float(i), "s", "t", 1, 1) for i in range(11)]
    outcomes: list[Outcome | None] = [Outcome(200, (i + 1) / 1000) for i in range(5)]
    outcomes += [Outcome(429, 0.001), Outcome(503, 0.001), Outcome(500, 0.001), Outcome(None, 1.0, "ConnectError: x")]
    outcomes += [None, None]  # interrupted before these two were sent
    summary = summarize(plan, ReplayResult(outcomes, wall_s=4.5, interrupted=True))
    assert (summary.planned, summary.sent, summary.ok) == (11, 9, 5)
    assert (summary.rate_limited, summary.unavailable, summary.errors) == (1, 1, 2)
    assert summary.error_kinds == {"500": 1, "ConnectError": 1}
    assert (summary.latency_p50_ms, summary.latency_p99_ms) == (3.0, 5.0)
    assert summary.achieved_rps == pytest.approx(2.0)
    assert summary.offered_rps == pytest.approx(1.1)
    assert "(interrupted)" in summary.lines()[0]


def test_summary_without_ok_answers_has_no_latency() -> None:
    summary = summarize([PlannedRequest(0.0, "s", "t", 1, 1)], ReplayResult([Outcome(503, 0.1)], wall_s=0.1))
    assert summary.latency_p50_ms is None
    assert "p50 n/a" in summary.lines()[2]


def test_the_shipped_request_trace_is_read_with_its_tokens_scaled() -> None:
    at_8 = read_trace(AZURE_CONV_SLICE)
    at_16 = read_trace(AZURE_CONV_SLICE, scale_tokens=16)
    assert len(at_8) == len(at_16) == 600
    assert at_8[0].arrival_s == 0.0
    assert at_8[-1].arrival_s == pytest.approx(148, abs=1)
    # the first row has 374 context and 44 generated tokens: 46 and 5 at ÷8 (as load_trace scales), 23 and 2 at ÷16
    assert at_8 == load_trace(AZURE_CONV_SLICE, limit=600, compression=1.0)
    assert (at_16[0].prompt_tokens, at_16[0].generated_tokens) == (23, 2)


def test_a_shipped_demand_series_becomes_its_requests() -> None:
    trace = read_trace(SERIES, series_tokens=(16, 8))
    total = sum(int(line.split(",")[1]) for line in SERIES.read_text().splitlines()[1:] if line.split(",")[1])
    assert len(trace) == total
    assert trace[0].arrival_s < 60.0 and (trace[0].prompt_tokens, trace[0].generated_tokens) == (16, 8)


def test_an_unreadable_trace_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(ReplayError, match="no such trace file"):
        read_trace(tmp_path / "missing.csv")
    bad = tmp_path / "bad.csv"
    bad.write_text("timestamp,value\nyesterday,3\n")
    with pytest.raises(ReplayError, match=r"bad\.csv"):
        read_trace(bad)


@pytest.mark.slow
def test_replay_sends_on_time_over_http_and_counts_every_answer(serving: tuple[str, Seen]) -> None:
    url, seen = serving
    options = ReplayOptions(servers=(url,), pool="chat", tenants=("acme", "over", "busy", "boom"), speed=20.0)
    plan = schedule(trace_of([float(i) for i in range(20)]), options)  # 20 requests over 0.95 s
    sender = HttpSender("chat", Endpoint.COMPLETIONS, token="gateway-token", tenant_keys={"acme": "fp_tenant_a"})
    progress: list[tuple[int, int]] = []
    try:
        result = run_replay(plan, sender, concurrency=8, on_progress=lambda d, t: progress.append((d, t)))
    finally:
        sender.close()
    summary = summarize(plan, result)
    assert (summary.sent, summary.ok, summary.rate_limited, summary.unavailable, summary.errors) == (20, 5, 5, 5, 5)
    assert summary.error_kinds == {"500": 5}
    assert 0.9 <= result.wall_s < 5.0  # paced by the plan, not sent all at once
    assert progress[-1] == (20, 20)
    path, tenant, body, auth = seen.requests[0]
    assert (path, tenant, auth) == ("/v1/completions", "acme", "Bearer fp_tenant_a")  # its own key
    assert {a for _, t, _, a in seen.requests if t != "acme"} == {"Bearer gateway-token"}  # the others have none
    assert body["model"] == "chat" and body["max_tokens"] == 4 and len(body["prompt"]) == 9  # 10 tokens with BOS


@pytest.mark.slow
def test_classify_requests_carry_one_image_and_an_unreachable_server_is_an_error(serving: tuple[str, Seen]) -> None:
    url, seen = serving
    nowhere = f"http://127.0.0.1:{free_port()}"
    options = ReplayOptions(servers=(url, nowhere), pool="vision", endpoint=Endpoint.CLASSIFY, speed=100.0)
    plan = schedule(trace_of([0.0, 1.0]), options)
    sender = HttpSender("vision", Endpoint.CLASSIFY, timeout_s=5.0)
    try:
        summary = summarize(plan, run_replay(plan, sender))
    finally:
        sender.close()
    assert (summary.ok, summary.errors, summary.error_kinds) == (1, 1, {"ConnectError": 1})
    path, _tenant, body, _auth = seen.requests[0]
    assert path == "/v1/classify"
    assert body["model"] == "vision"
    assert [len(body["inputs"]), len(body["inputs"][0]), len(body["inputs"][0][0])] == [1, 3, 64]


def test_stop_ends_sending_and_says_it_was_interrupted(serving: tuple[str, Seen]) -> None:
    url, _seen = serving
    plan = schedule(trace_of([0.0, 60.0]), ReplayOptions(servers=(url,), pool="chat"))
    stop = threading.Event()
    sender = HttpSender("chat", Endpoint.COMPLETIONS)
    timer = threading.Timer(0.3, stop.set)
    timer.start()
    try:
        result = run_replay(plan, sender, stop=stop)
    finally:
        sender.close()
        timer.cancel()
    summary = summarize(plan, result)
    assert (summary.sent, summary.ok, summary.interrupted) == (1, 1, True)
    assert result.wall_s < 5.0


@pytest.mark.slow
def test_the_cli_replays_a_shipped_trace_and_prints_the_summary(
    serving: tuple[str, Seen], capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    url, seen = serving
    key_file = tmp_path / "over.key"
    key_file.write_text("fp_tenant_o\n")
    argv = ["replay", str(AZURE_CONV_SLICE), "--server", url, "--speed", "100", "--duration", "1"]
    monkeypatch.setenv("FLEETPILOT_TENANT_KEYS", "acme=fp_tenant_a")
    keys = ["--tenant-key", f"over=@{key_file}"]
    assert main([*argv, *keys, "--pool", "chat"]) == 0  # the tenants are those of the keys
    assert {(t, a) for _, t, _, a in seen.requests} == {("acme", "Bearer fp_tenant_a"), ("over", "Bearer fp_tenant_o")}
    out = capsys.readouterr().out.splitlines()
    sent = len(seen.requests)
    assert sent > 50  # 148 s of trace at 100× is 1.48 s; the first second holds most of the 600 requests
    assert out[0].startswith(f"sent {sent} of {sent} planned requests"), out
    assert out[1].startswith(f"ok {(sent + 1) // 2}, 429 {sent // 2}, 503 0, errors 0")
    assert out[2].startswith("latency of ok answers: p50 ")
    assert "achieved rate" in out[3]


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--speed", "-2"], "--speed"),
        (["--scale-tokens", "0"], "--scale-tokens"),
        (["--loop"], "--loop"),
        (["--tenant-key", "acme"], "--tenant-key"),
        (["--tenant-key", "acme=@/nonexistent/key"], "cannot read"),
    ],
)
def test_the_cli_refuses_bad_options_with_exit_2(
    extra: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["replay", str(AZURE_CONV_SLICE), "--server", "http://127.0.0.1:9", *extra]) == 2
    assert message in capsys.readouterr().err


def test_the_cli_exits_1_when_nothing_answers(capsys: pytest.CaptureFixture[str]) -> None:
    nowhere = f"http://127.0.0.1:{free_port()}"
    assert main(["replay", str(SERIES), "--server", nowhere, "--limit", "3", "--speed", "1000"]) == 1
    assert "errors 3 (ConnectError 3)" in capsys.readouterr().out

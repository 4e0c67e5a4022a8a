"""The noisy-neighbour episode's pure parts: the burst's growth and end, chat's calibrated SLO, the lines that print
the server's record, and what the load notes of acme's answers."""

from __future__ import annotations

import json
import threading
import time
from typing import Any

import httpx
import pytest

from demo.burst import DEMO_CALIBRATION, NOISY_EPISODE, NoisyEpisode, SloCalibration, burst_over, next_rps
from demo.episode import EpisodeContext, RecordingSender, TenantLatencies, calibrate_slo
from demo.recorded import ServerRecord, alert_change, alert_line, event_line
from replay.driver import Outcome, PlannedRequest
from tests.support.clock import FakeClock

LOAD = 1_800_000_000.0  # the 'Load:' line, Unix seconds


@pytest.mark.parametrize(
    ("rps", "acme_latencies", "grown"),
    [
        (2.0, [0.3, 0.5, 1.0], 3.0),  # within the 1.7-s SLO: half again
        (3.0, [0.3, 1.7], 4.5),  # at the SLO is within it
        (3.0, [], 4.5),  # no answer in the step says nothing: grows
        (4.5, [0.3, 2.5], 4.5),  # over: held, the enforcer is to act on it
        (12.0, [0.4], 16.0),  # never past max_rps
        (16.0, [0.4], 16.0),
    ],
)
def test_the_burst_grows_while_acme_is_within_the_slo_and_holds_once_it_is_not(
    rps: float, acme_latencies: list[float], grown: float
) -> None:
    assert next_rps(NOISY_EPISODE, rps, acme_latencies, 1.7) == pytest.approx(grown)


@pytest.mark.parametrize(
    ("elapsed_s", "throttled", "alerted", "over"),
    [
        (60.0, True, False, False),  # the alert has not fired yet: the harm goes on
        (60.0, False, True, False),
        (60.0, True, True, True),  # both recorded: the batch job is done
        (179.0, False, False, False),
        (180.0, False, False, True),  # at its longest whatever happened
    ],
)
def test_the_burst_ends_once_the_server_recorded_both_or_at_its_longest(
    elapsed_s: float, throttled: bool, alerted: bool, over: bool
) -> None:
    assert burst_over(elapsed_s, NOISY_EPISODE, throttled=throttled, alerted=alerted) is over


def test_the_demo_episode_reaches_its_bound_in_six_steps_and_ends_inside_the_day() -> None:
    assert NOISY_EPISODE.steps_to_max() == 6  # 3, 4.5, 6.75, 10.1, 15.2, 16
    assert NOISY_EPISODE.end_s == 230.0 and [NOISY_EPISODE.bursts_on(lap) for lap in range(4)] == [1, 0, 1, 0]


@pytest.mark.parametrize(
    ("episode", "message"),
    [
        (dict(start_s=-1.0), "start_s >= 0"),
        (dict(first_rps=0.0), "0 < first_rps <= max_rps"),
        (dict(first_rps=20.0), "0 < first_rps <= max_rps"),
        (dict(growth=1.0), "growth > 1"),
        (dict(step_s=200.0), "step_s <= max_s"),
        (dict(generated_tokens=0), "generated_tokens"),
        (dict(every_days=0), "every_days"),
    ],
)
def test_a_bad_episode_is_refused(episode: dict[str, Any], message: str) -> None:
    fields = dict(start_s=50.0, first_rps=2.0, growth=1.5, step_s=10.0, max_rps=16.0, max_s=180.0) | episode
    with pytest.raises(ValueError, match=message):
        NoisyEpisode("globex", **fields)


@pytest.mark.parametrize(
    ("reported", "slo_s"),
    [
        ([0.12, 0.42, 0.3], 1.7),  # 4 × the worst, two significant digits
        ([2.6], 10.0),  # a slow machine gets a looser promise
        ([0.01], 0.25),  # never under the floor
        ([], None),  # nothing reported: the configured SLO stays
    ],
)
def test_chats_slo_is_calibrated_from_the_worst_p99_of_the_warm_up(reported: list[float], slo_s: float | None) -> None:
    assert DEMO_CALIBRATION.slo_seconds(reported) == slo_s
    assert SloCalibration(slo_factor=2.0).slo_seconds([0.42]) == 0.84
    assert DEMO_CALIBRATION.warm_up_end_s < NOISY_EPISODE.start_s  # calibrated before the first burst


THROTTLE = {
    "id": 7,
    "ts": LOAD + 96.2,
    "tenant": "globex",
    "scope": "demo-node-3/chat",
    "kind": "throttle",
    "level_from": 1.0,
    "level_to": 0.5,
    "message": "globex took 84% of demo-node-3/chat (over 60%) for 3 windows ...; level 1 → 0.5",
}
FIRING = {
    "id": 3,
    "status": "firing",
    "labels": {"alertname": "P99LatencyAboveSlo", "severity": "critical", "rule_id": "1", "node": "n3", "pool": "chat"},
    "value": 3.456,
    "active_since": LOAD + 61.0,
    "fired_at": LOAD + 121.0,
    "resolved_at": None,
}


def test_the_server_record_is_printed_as_lines_timed_from_the_load() -> None:
    assert event_line(THROTTLE, LOAD) == (
        "Recorded 1:36  throttle  globex on demo-node-3/chat: globex took 84% of demo-node-3/chat (over 60%) for 3 "
        "windows ...; level 1 → 0.5"
    )
    assert alert_change(FIRING) == LOAD + 121.0
    assert alert_line(FIRING, LOAD + 121.0, LOAD) == (
        "Recorded 2:01  alert P99LatencyAboveSlo firing (node=n3, pool=chat), value 3.46"
    )
    resolved = FIRING | {"status": "resolved", "resolved_at": LOAD + 500.0}
    assert (
        alert_line(resolved, LOAD + 500.0, LOAD)
        == "Recorded 8:20  alert P99LatencyAboveSlo resolved (node=n3, pool=chat)"
    )
    assert alert_change(FIRING | {"status": "pending", "fired_at": None}) is None
    assert alert_change(resolved | {"fired_at": None}) is None  # resolved without ever firing: nothing to say


def test_the_server_record_prints_each_change_once_and_nothing_from_before_the_load() -> None:
    answers: dict[str, list[dict[str, Any]]] = {"/api/v1/enforcement-events": [], "/api/v1/alerts": []}

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, content=json.dumps({"items": answers[request.url.path], "next": None}))

    api = httpx.Client(base_url="http://server/api/v1", transport=httpx.MockTransport(handler))
    lines: list[str] = []
    record = ServerRecord(api, LOAD, out=lines.append)
    old = THROTTLE | {"id": 1, "ts": LOAD - 600.0}  # an earlier run's, on the same database
    answers["/api/v1/enforcement-events"] = [THROTTLE, old]  # newest first
    answers["/api/v1/alerts"] = [FIRING]
    record.poll()
    record.poll()
    assert [line.split("  ")[1] for line in lines] == [
        "throttle",
        "alert P99LatencyAboveSlo firing (node=n3, pool=chat), value 3.46",
    ]
    assert record.throttled_since(LOAD + 50, "globex") and not record.throttled_since(LOAD + 100, "globex")
    assert not record.throttled_since(LOAD, "acme")
    assert record.latency_alert_since(LOAD + 50, "chat") and not record.latency_alert_since(LOAD + 50, "vision")
    answers["/api/v1/alerts"] = [FIRING | {"status": "resolved", "resolved_at": LOAD + 500.0}]
    record.poll()
    assert len(lines) == 3 and lines[-1].startswith("Recorded 8:20  alert P99LatencyAboveSlo resolved")


def test_the_load_notes_the_latency_of_acmes_answered_requests_only() -> None:
    clock = FakeClock(100.0)
    acme = TenantLatencies("acme", clock=clock)
    outcomes = iter([Outcome(200, 1.5), Outcome(200, 9.0), Outcome(429, 0.01), Outcome(None, 2.0, "ConnectError")])

    class Answering:
        def send(self, request: PlannedRequest) -> Outcome:
            return next(outcomes)

    sender = RecordingSender(Answering(), acme)
    for tenant in ("acme", "globex", "acme", "acme"):
        sender.send(PlannedRequest(0.0, "http://a", tenant, 10, 10))
        clock.advance(5)
    assert acme.since(100.0) == [1.5] and acme.since(100.1) == []


def _calibrating(points: list[list[float]]) -> tuple[EpisodeContext, list[dict[str, Any]]]:
    """An episode context whose server answers ``points`` for chat's p99 series and notes each PATCH."""
    patched: list[dict[str, Any]] = []

    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/api/v1/series":
            assert request.url.params["pool"] == "chat" and request.url.params["start"] == str(LOAD + 10.0)
            return httpx.Response(200, json={"metric": "request_latency_p99_seconds", "points": points})
        if request.method == "PATCH":
            patched.append(json.loads(request.content))
            return httpx.Response(200, json={})
        return httpx.Response(200, json={"slo": {"latency_p99_seconds": 10.0, "attainment": 0.95}})

    api = httpx.Client(base_url="http://server/api/v1", transport=httpx.MockTransport(handler))
    started = time.monotonic() - 60  # the warm-up is over: no wait
    ctx = EpisodeContext("chat", ["http://a"], [], ServerRecord(api, LOAD), api, started, LOAD, 300.0)
    return ctx, patched


def test_the_calibration_gives_chat_the_slo_its_warm_up_makes_and_keeps_its_attainment() -> None:
    ctx, patched = _calibrating([[LOAD + 12, 0.3], [LOAD + 20, 1.03], [LOAD + 30, 0.5]])
    lines: list[str] = []
    assert calibrate_slo(ctx, DEMO_CALIBRATION, threading.Event(), lines.append) == 4.1
    assert patched == [{"slo": {"latency_p99_seconds": 4.1, "attainment": 0.95}}]
    assert lines == [
        "Calibration 0:45: chat's worst reported p99 from 0:10 to 0:45 was 1.03 s on this machine; its SLO is now "
        "4 × that: 4.1 s (PATCH /api/v1/pools/chat)"
    ]


def test_a_warm_up_without_a_reported_p99_keeps_the_configured_slo() -> None:
    ctx, patched = _calibrating([])
    lines: list[str] = []
    assert calibrate_slo(ctx, DEMO_CALIBRATION, threading.Event(), lines.append) is None
    assert patched == [] and "its configured SLO stays" in lines[0]

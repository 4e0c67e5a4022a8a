"""`fleetpilot demo` (what `make demo` runs): what it plays and seeds, pure and on a real database; then one real run
(slow) shared by two tests: it prints the two lines, its agents show up, globex's burst gets it throttled and chat's
latency alert fires as the server records them, and Ctrl-C stops it cleanly."""

from __future__ import annotations

import dataclasses
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import Engine, func, select

from autoscaler.policy.rails import scale_down_window_seconds
from autoscaler.policy.settings import PolicySettings
from collector.rollups import WATERMARK_NAME
from collector.tables import ROLLUP_BUCKET_SECONDS, job_state, rollups_1m, samples
from demo.burst import DEMO_CALIBRATION, NOISY_EPISODE
from demo.history import SeededHistory, seed_history
from demo.load import TENANTS, compressed_day, day_plan
from demo.run import (
    DEMO_NODES,
    DEMO_POOL_SPECS,
    DEMO_SETTINGS,
    RETIRED_PROFILE,
    _demo_pools_and_tenants,
    demo_settings_text,
)
from demo.timeline import clock, latency_rule, scale_thresholds, timeline_lines
from fleet.pools import Policy, PoolStore
from fleetpilot.jobs import enforcer_settings
from fleetpilot.settings import ServerSettings
from predictor.inputs import Window, pool_demand

NOW = 1_800_000_030.5  # half a minute into a minute
DAY = compressed_day()
CHAT = DEMO_POOL_SPECS["chat"]
DEMO_POLICY = PolicySettings(stabilization_window_seconds=DEMO_SETTINGS["scale_down_window_seconds"][1])


def test_the_compressed_day_scales_chat_up_and_down_within_five_minutes() -> None:
    up_rps, down_rps = scale_thresholds(CHAT)
    assert (up_rps, down_rps) == pytest.approx((1.155, 1.05))  # 3 replicas × 0.5 × 0.7 (× 1.1)
    up_s, down_s = DAY.crossings(up_rps, down_rps)
    assert DAY.lap_s == 300.0 and DAY.step_s == pytest.approx(600 / 288)
    assert 30 < up_s < NOISY_EPISODE.start_s < down_s  # the rise comes after the first forecasts
    # after the fall nothing asks for the 4th replica again, and the demo's window is not stretched to the startup
    assert max(DAY.day_rps[round(down_s / DAY.step_s) :]) <= down_rps
    window_s = scale_down_window_seconds(DEMO_POLICY, CHAT.startup_seconds)
    assert window_s == DEMO_SETTINGS["scale_down_window_seconds"][1] == 60.0
    # the scale-down, after the window, inside the first day even when the burst runs to its longest
    assert NOISY_EPISODE.end_s + window_s < DAY.lap_s
    # production's 300 s would not have agreed inside the day
    assert down_s + scale_down_window_seconds(PolicySettings(), CHAT.startup_seconds) > 300
    assert max(DAY.day_rps) == pytest.approx(1.65) and max(DAY.day_rps) / (CHAT.max_replicas * 0.5) < 1


def test_a_day_that_never_crosses_a_threshold_says_so() -> None:
    with pytest.raises(ValueError, match="never rises past 9"):
        DAY.crossings(9.0, 1.0)
    with pytest.raises(ValueError, match=r"never falls back to 0\.1"):
        DAY.crossings(1.5, 0.1)


def test_the_history_is_the_six_hours_before_the_day_at_the_same_scale() -> None:
    minutes = DAY.history_per_minute()
    assert len(minutes) == 360 and minutes[::10] == pytest.approx(DAY.history_rps)
    assert minutes[5] == pytest.approx((DAY.history_rps[0] + DAY.history_rps[1]) / 2)
    assert abs(minutes[-1] - DAY.day_rps[0]) < abs(DAY.history_rps[-1] - DAY.day_rps[0])  # 15:59 leads into 16:00


def test_the_plan_alternates_tenants_over_the_servers_with_the_traces_sizes() -> None:
    servers = ["http://a", "http://b", "http://c"]
    plan = day_plan(DAY, servers, laps=3)
    assert [r.at_s for r in plan] == sorted(r.at_s for r in plan)
    per_day = sum(rps * DAY.step_s for rps in DAY.day_rps)
    assert len(plan) == pytest.approx(3 * per_day, abs=3)  # globex's burst is not planned: it is sized as it runs
    assert {r.tenant for r in plan} == set(TENANTS) and [r.tenant for r in plan[:4]] == ["acme", "globex"] * 2
    assert {r.server for r in plan} == set(servers) and all(r.prompt_tokens >= 1 for r in plan)
    day_tokens = [r.max_tokens for r in plan if r.tenant == "acme"]
    assert sum(day_tokens) / len(day_tokens) < NOISY_EPISODE.generated_tokens / 2  # the burst's are long
    assert NOISY_EPISODE.end_s < DAY.lap_s  # the longest burst ends inside its day


def test_a_chat_left_on_an_earlier_demos_engine_profile_gets_todays_spec(database_url: str, engine: Engine) -> None:
    store = PoolStore(engine)
    old = dataclasses.replace(CHAT, engine=RETIRED_PROFILE, model="tiny-chat", policy=Policy.HYBRID)
    store.create("chat", old, now=NOW)
    store.create("vision", dataclasses.replace(DEMO_POOL_SPECS["vision"], max_replicas=3), now=NOW)  # an edit
    _demo_pools_and_tenants(database_url)
    chat, vision = store.get("chat"), store.get("vision")
    assert chat is not None and chat.spec == CHAT
    assert vision is not None and vision.spec.max_replicas == 3  # what an operator edited stays


def _chat_demand(engine: Engine, start: float, end: float) -> list[float]:
    with engine.connect() as conn:
        return [float(v) for v in pool_demand(conn, "chat", "request_rate_per_second", Window(start, end)).values]


def test_history_is_seeded_as_rollups_ending_at_now_with_the_watermark(engine: Engine) -> None:
    minutes = DAY.history_per_minute()
    seeded = seed_history(engine, "chat", minutes, DEMO_NODES, now=NOW)
    end = 1_800_000_000.0  # the open minute is not seeded
    assert (seeded.start, seeded.end, seeded.minutes, seeded.rows) == (end - 360 * 60, end, 360, 360 * 3)
    assert _chat_demand(engine, seeded.start, end) == pytest.approx(minutes)  # the nodes' thirds add up
    with engine.connect() as conn:
        assert conn.scalar(select(job_state.c.watermark).where(job_state.c.name == WATERMARK_NAME)) == end
        assert conn.scalar(select(func.max(rollups_1m.c.bucket))) == end - ROLLUP_BUCKET_SECONDS
        other = conn.scalar(select(func.count()).where(rollups_1m.c.token_throughput_per_second_mean.is_not(None)))
    assert other == 0  # what was not measured stays absent


def test_a_second_seeding_writes_nothing_over_earlier_history(engine: Engine) -> None:
    minutes = DAY.history_per_minute()
    first = seed_history(engine, "chat", minutes, DEMO_NODES, now=NOW)
    assert seed_history(engine, "chat", minutes, DEMO_NODES, now=NOW + 20).rows == 0  # a restart in the minute
    later = seed_history(engine, "chat", minutes, DEMO_NODES, now=NOW + 3600)  # an hour on: the window starts in it
    assert (later.start, later.minutes, later.rows) == (first.start + 3600, 0, 0)
    with engine.connect() as conn:
        assert conn.scalar(select(func.count()).select_from(rollups_1m)) == 360 * 3


def test_seeding_stops_at_the_first_live_sample_and_keeps_the_jobs_watermark(engine: Engine) -> None:
    live_ts = NOW - 600  # an agent's sample of a run ten minutes ago, not rolled up yet
    with engine.begin() as conn:
        row = {"node_id": "demo-node-1", "seq": 1, "ts": live_ts, "device": -1, "pool": "chat"}
        conn.execute(samples.insert(), [{**row, "request_rate_per_second": 2.0}])
    seeded = seed_history(engine, "chat", DAY.history_per_minute(), DEMO_NODES, now=NOW)
    assert seeded.end == 1_800_000_000.0 - 600 and seeded.minutes == 350
    with engine.begin() as conn:
        assert conn.scalar(select(job_state.c.watermark)) == seeded.end  # the job rolls the live minutes from here
        conn.execute(job_state.update().values(watermark=NOW))
    seed_history(engine, "chat", DAY.history_per_minute(), DEMO_NODES, now=NOW + 7200)
    with engine.connect() as conn:
        assert conn.scalar(select(job_state.c.watermark)) == NOW  # a job that has run keeps its own


@pytest.mark.parametrize(
    ("per_minute", "nodes", "message"), [([1.0], [], "at least one node"), ([-1.0], ["n"], ">= 0")]
)
def test_bad_history_is_refused(engine: Engine, per_minute: list[float], nodes: list[str], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        seed_history(engine, "chat", per_minute, nodes, now=NOW)


def test_the_timeline_gives_the_times_the_plan_and_the_products_knobs_make() -> None:
    up_s, down_s = DAY.crossings(*scale_thresholds(CHAT))
    seeded = SeededHistory(1080, 0.0, 21_600.0)
    enforcer = enforcer_settings(ServerSettings())
    lines = "\n".join(
        timeline_lines(DAY, NOISY_EPISODE, DEMO_CALIBRATION, DEMO_POOL_SPECS, seeded, enforcer, DEMO_POLICY)
    )
    assert clock(70) == "1:10" and clock(up_s) in lines and clock(down_s) in lines
    assert "360 minutes seeded" in lines and f"{clock(NOISY_EPISODE.start_s)}  globex bursts into chat" in lines
    assert "0:45  'Calibration': chat's SLO becomes 4 × the worst p99 its replicas reported from 0:10" in lines
    assert "2 requests/s of 128 tokens, ×1.5 each 10 s in which\n        acme's chat p99 stays within the SLO" in lines
    assert "(at most 16/s, by 1:50)" in lines  # 2, 3, 4.5, 6.75, 10.1, 15.2, 16: six steps of 10 s
    # what depends on the machine is said as the recorded events to expect, from their earliest
    assert "from ~1:20  'Recorded ... throttle globex'" in lines and "for 3 windows (30 s)" in lines
    rule = latency_rule()
    assert f"from ~1:50  'Recorded ... alert {rule.name} firing' ({rule.severity.value})" in lines
    assert "by 3:50  globex's burst ends once both are recorded (at most 3:00 after it began)" in lines
    assert "'Recorded ... restore globex' after 30 s of calm" in lines
    assert "burst's end + 60 s  chat scales down once 60 s of decisions agree" in lines
    assert "globex bursts every 2 days, 10:00 apart" in lines and "every rule keeps firing 5 min" in lines


def test_the_banner_names_what_the_demo_shortens_beside_the_production_defaults() -> None:
    assert demo_settings_text() == (
        "rollups every 10 s (production default 60 s), forecasts every 20 s (production default 60 s), "
        "scale-down window 60 s (production default 300 s)"
    )


@dataclass
class DemoRun:
    """A real ``fleetpilot demo`` in a temporary directory: its printed lines (read as they come), the admin API."""

    process: subprocess.Popen[str]
    directory: Path
    lines: list[str] = field(default_factory=list)
    api: httpx.Client | None = None

    def read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.append(line.rstrip("\n"))

    def first(self, pattern: str, timeout_s: float) -> re.Match[str]:
        """The first printed line matching ``pattern``, waiting up to ``timeout_s`` for it."""
        deadline = time.monotonic() + timeout_s
        while True:
            found = next((m for line in list(self.lines) if (m := re.fullmatch(pattern, line))), None)
            if found is not None:
                return found
            assert time.monotonic() < deadline, f"no line {pattern!r} within {timeout_s:.0f} s:\n" + "\n".join(
                self.lines[-30:]
            )
            assert self.process.poll() is None, "the demo exited:\n" + "\n".join(self.lines[-30:])
            time.sleep(0.5)

    def items(self, path: str, **params: str) -> list[dict[str, Any]]:
        assert self.api is not None
        found: list[dict[str, Any]] = self.api.get(path, params=params).json()["items"]
        return found


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DemoRun]:
    """One real demo for the module's tests (it takes minutes to get to its episode); Ctrl-C must stop it cleanly."""
    directory = tmp_path_factory.mktemp("demo")
    process = subprocess.Popen(
        [sys.executable, "-m", "fleetpilot", "demo"],
        cwd=directory,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    run = DemoRun(process, directory)
    threading.Thread(target=run.read, daemon=True).start()
    try:
        url = run.first(r"Dashboard: (http://127\.0\.0\.1:\d+)/", 90)[1]
        token = run.first(r"Admin token: (\S+)", 10)[1]
        run.api = httpx.Client(base_url=f"{url}/api/v1", headers={"Authorization": f"Bearer {token}"}, timeout=10.0)
        yield run
    finally:
        process.send_signal(signal.SIGINT)
        code = process.wait(60)
        if run.api is not None:
            run.api.close()
    assert code == 0


def wait_for(what: str, probe: Callable[[], bool], timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while not probe():
        assert time.monotonic() < deadline, f"no {what} within {timeout_s:.0f} s"
        time.sleep(1.0)


@pytest.mark.slow
def test_demo_runs_three_agents_and_shows_a_forecast_and_decisions(demo: DemoRun) -> None:
    api = demo.api
    assert api is not None
    wait_for("three nodes up", lambda: [n["status"] for n in demo.items("/nodes")] == ["up"] * 3, 60)
    assert [n["id"] for n in demo.items("/nodes")] == ["demo-node-1", "demo-node-2", "demo-node-3"]
    assert (demo.directory / ".fleetpilot" / "fleetpilot.db").exists()
    assert [p["name"] for p in demo.items("/pools")] == ["chat", "vision"]
    assert [t["name"] for t in demo.items("/tenants")] == ["acme", "globex"]
    # the seeded history: chat's forecast and its band from the first forecast, 20 s after the server started
    wait_for("chat forecast", lambda: api.get("/pools/chat/forecast").status_code == 200, 60)
    points = api.get("/pools/chat/forecast").json()["points"]
    assert points and all(p["lo"] <= p["yhat"] <= p["hi"] for p in points)
    # vision starts with a replica on each node, one more than its minimum: a decision within the first minute
    wait_for("scaling event", lambda: bool(demo.items("/scaling-events")), 120)
    assert api.get("/nodes/demo-node-1").json()["series"]  # live metrics


@pytest.mark.slow
def test_demo_shows_globex_throttled_and_chats_latency_alert_as_the_server_records_them(demo: DemoRun) -> None:
    """Judged by what the server recorded (its enforcement events and alerts), within the bound the episode promises:
    both before the burst's longest end, 3:50 into the day, on this busy 2-core machine or a fast one."""
    api = demo.api
    assert api is not None
    demo.first(r"Load: .* the day starts: .*", 240)
    load = time.time()  # read within half a second of its printing
    calibrated = demo.first(r"Calibration 0:45: chat's worst reported p99 .* its SLO is now 4 × that: (\S+) s .*", 90)
    slo_s = float(calibrated[1])
    assert api.get("/pools/chat").json()["slo"]["latency_p99_seconds"] == slo_s
    bound_s = NOISY_EPISODE.end_s + 15  # the burst's longest end, and a poll of the server's record
    demo.first(
        r"Recorded \d+:\d\d  throttle  globex on demo-node-\d/chat: globex took .*; level 1 → 0\.5", bound_s + 30
    )
    demo.first(r"Recorded \d+:\d\d  alert P99LatencyAboveSlo firing \(node=demo-node-\d, pool=chat\).*", 30)
    throttles = [e for e in demo.items("/enforcement-events", tenant="globex") if e["kind"] == "throttle"]
    first = min(e["ts"] for e in throttles) - load
    assert NOISY_EPISODE.start_s <= first <= bound_s
    oldest = throttles[-1]["figures"]  # newest first
    assert oldest["victim"] == "acme" and oldest["victim_slo_p99_seconds"] == slo_s
    latency = [
        a["fired_at"] - load
        for a in demo.items("/alerts", pool="chat")
        if a["labels"]["alertname"] == "P99LatencyAboveSlo" and a["fired_at"] is not None
    ]
    assert latency and NOISY_EPISODE.start_s <= min(latency) <= bound_s
    demo.first(r"Load \d+:\d\d: globex's burst ends \(.*", 30)  # once both were recorded

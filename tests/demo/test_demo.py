"""`fleetpilot demo` (what `make demo` runs): what it plays and seeds, pure and on a real database; then one real run
(slow): it prints the two lines, its agents show up, Ctrl-C stops it cleanly."""

from __future__ import annotations

import dataclasses
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import Engine, func, select

from autoscaler.policy.rails import scale_down_window_seconds
from autoscaler.policy.settings import PolicySettings
from collector.rollups import WATERMARK_NAME
from collector.tables import ROLLUP_BUCKET_SECONDS, job_state, rollups_1m, samples
from demo.history import SeededHistory, seed_history
from demo.load import NOISY_EPISODE, TENANTS, NoisyEpisode, compressed_day, day_plan
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
    # the scale-down, after the burst's requests and the window, inside the first day, with a minute to spare
    assert max(down_s, NOISY_EPISODE.end_s) + window_s < DAY.lap_s - 60
    # production's 300 s would not have agreed inside the day
    assert max(down_s, NOISY_EPISODE.end_s) + scale_down_window_seconds(PolicySettings(), CHAT.startup_seconds) > 300
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


def test_the_plan_alternates_tenants_and_adds_the_noisy_tenants_burst_each_day() -> None:
    servers = ["http://a", "http://b", "http://c"]
    plan = day_plan(DAY, NOISY_EPISODE, servers, laps=3)
    assert [r.at_s for r in plan] == sorted(r.at_s for r in plan)
    per_day = sum(rps * DAY.step_s for rps in DAY.day_rps)
    burst = NOISY_EPISODE.rps * (NOISY_EPISODE.end_s - NOISY_EPISODE.start_s)
    assert NOISY_EPISODE.every_days == 2 and len(plan) == pytest.approx(3 * per_day + 2 * burst, abs=3)
    quiet = [r for r in plan if DAY.lap_s + NOISY_EPISODE.start_s <= r.at_s < DAY.lap_s + NOISY_EPISODE.end_s]
    assert {r.tenant for r in quiet} == set(TENANTS) and max(r.max_tokens for r in quiet) <= 100  # day 2: no burst
    for lap in (0, 2):
        start, end = lap * DAY.lap_s + NOISY_EPISODE.start_s, lap * DAY.lap_s + NOISY_EPISODE.end_s
        inside = [r for r in plan if start <= r.at_s < end]
        before = [r for r in plan if start - 60 <= r.at_s < start]
        assert {r.tenant for r in before} == set(TENANTS)
        assert sum(r.tenant == "globex" for r in inside) >= burst  # the burst, and the day's share of globex
        assert sum(r.tenant == "globex" for r in inside) / len(inside) > 0.7  # of the requests
        tokens = sum(r.max_tokens for r in inside if r.tenant == "globex") / sum(r.max_tokens for r in inside)
        assert tokens > 0.8  # of what chat generates: past its 50 % share and the enforcer's 60 %
        assert {r.max_tokens for r in inside if r.tenant == "globex"} >= {NOISY_EPISODE.generated_tokens}
    assert {r.server for r in plan} == set(servers) and all(r.prompt_tokens >= 1 for r in plan)
    day_tokens = [r.max_tokens for r in plan if r.tenant == "acme"]
    assert sum(day_tokens) / len(day_tokens) < NOISY_EPISODE.generated_tokens / 2  # the burst's are long


@pytest.mark.parametrize(
    ("episode", "message"),
    [
        (dict(start_s=100.0, end_s=90.0, rps=1.0), "start_s < end_s"),
        (dict(start_s=100.0, end_s=120.0, rps=0.0), "rps > 0"),
        (dict(start_s=100.0, end_s=120.0, rps=1.0, generated_tokens=0), "generated_tokens"),
        (dict(start_s=100.0, end_s=120.0, rps=1.0, every_days=0), "every_days"),
    ],
)
def test_a_bad_episode_is_refused(episode: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        NoisyEpisode("globex", **episode)


def test_an_episode_past_the_day_is_refused() -> None:
    with pytest.raises(ValueError, match="after the day's 300 s"):
        day_plan(DAY, NoisyEpisode("globex", 250.0, 350.0, 1.0), ["http://a"], laps=1)


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
    lines = "\n".join(timeline_lines(DAY, NOISY_EPISODE, DEMO_POOL_SPECS, seeded, enforcer, DEMO_POLICY))
    assert clock(70) == "1:10" and clock(up_s) in lines and clock(down_s) in lines
    assert "360 minutes seeded" in lines and f"{clock(NOISY_EPISODE.start_s)}  globex bursts" in lines
    rule = latency_rule()
    assert f"{rule.name} ({rule.severity.value}) fires" in lines and f"{rule.keep_firing_seconds:.0f} s after" in lines
    assert "after 30 s (3 windows)" in lines and "every rule keeps firing 5 min" in lines
    assert f"~{clock(max(down_s, NOISY_EPISODE.end_s) + 60)}  chat scales down once 60 s of decisions agree" in lines
    assert "globex bursts every 2 days, 10:00 apart" in lines


def test_the_banner_names_what_the_demo_shortens_beside_the_production_defaults() -> None:
    assert demo_settings_text() == (
        "rollups every 10 s (production default 60 s), forecasts every 20 s (production default 60 s), "
        "scale-down window 60 s (production default 300 s)"
    )


def read_announcement(demo: subprocess.Popen[str], timeout_s: float = 90.0) -> tuple[str, str]:
    assert demo.stdout is not None
    url = token = None
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and (url is None or token is None):
        line = demo.stdout.readline()
        if not line:
            break
        if m := re.fullmatch(r"Dashboard: (http://127\.0\.0\.1:\d+)/\n", line):
            url = m.group(1)
        if m := re.fullmatch(r"Admin token: (\S+)\n", line):
            token = m.group(1)
    assert url is not None, "no 'Dashboard: http://127.0.0.1:PORT/' line"
    assert token is not None, "no 'Admin token: TOKEN' line"
    return url, token


def wait_for(what: str, probe: Callable[[], bool], timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while not probe():
        assert time.monotonic() < deadline, f"no {what} within {timeout_s:.0f} s"
        time.sleep(1.0)


@pytest.mark.slow
def test_demo_runs_three_agents_and_shows_a_forecast_and_decisions_until_ctrl_c(tmp_path: Path) -> None:
    demo = subprocess.Popen(
        [sys.executable, "-m", "fleetpilot", "demo"],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        url, token = read_announcement(demo)
        api = httpx.Client(base_url=f"{url}/api/v1", headers={"Authorization": f"Bearer {token}"}, timeout=10.0)

        def items(path: str) -> list[dict[str, Any]]:
            found: list[dict[str, Any]] = api.get(path).json()["items"]
            return found

        wait_for("three nodes up", lambda: [n["status"] for n in items("/nodes")] == ["up"] * 3, 60)
        assert [n["id"] for n in items("/nodes")] == ["demo-node-1", "demo-node-2", "demo-node-3"]
        assert (tmp_path / ".fleetpilot" / "fleetpilot.db").exists()
        assert [p["name"] for p in items("/pools")] == ["chat", "vision"]
        assert [t["name"] for t in items("/tenants")] == ["acme", "globex"]
        # the seeded history: chat's forecast and its band from the first forecast, 20 s after the server started
        wait_for("chat forecast", lambda: api.get("/pools/chat/forecast").status_code == 200, 60)
        points = api.get("/pools/chat/forecast").json()["points"]
        assert points and all(p["lo"] <= p["yhat"] <= p["hi"] for p in points)
        # vision starts with a replica on each node, one more than its minimum: a decision within the first minute
        wait_for("scaling event", lambda: bool(items("/scaling-events")), 120)
        assert api.get("/nodes/demo-node-1").json()["series"]  # live metrics
        # the burst's throttle and alerts come about two minutes into the load; docs/demo.md has one run's times
    finally:
        demo.send_signal(signal.SIGINT)
        code = demo.wait(60)
    assert code == 0

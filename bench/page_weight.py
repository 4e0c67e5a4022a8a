"""Dashboard page weight and load time (issue 22): ``python -m bench.page_weight [--quick] [--runs N]``.

A real server on SQLite with a real agent replaying a recorded two-GPU H100 node, its history filled in straight
into storage so the charts draw full windows: 15 minutes of raw 500 ms samples (the node page's default, live
range) and 24 hours of 1-minute rollups (its longest range), a pool with a forecast. Headless Chromium (Debian's,
through Playwright) then loads every dashboard page with a cold cache ``runs`` times and takes the median of:
the bytes the page brought in (document, scripts, styles), the time to DOMContentLoaded (the charts are drawn by
then: their scripts are deferred) and to the load event. The baseline is the sign-in page, loaded the same way: the
ratio is the slowest page's load time over it, what the charts and the data cost over the lightest page. Progress
goes to stderr; the last line of stdout is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
from sqlalchemy import insert

from bench.lib.progress import progress_line
from collector.database import make_engine
from collector.tables import NO_DEVICE, NO_POOL, ROLLUP_STATS, rollup_column, rollups_1m, samples
from fleetpilot.launch import AgentProcess, ServerProcess
from inference_agent.probes import replay
from predictor.store import ForecastPoint, ForecastStore, GoodForecast, SubjectKind
from wire.catalog import BY_NAME, METRICS, Scope

RECORDING = Path(replay.__file__).resolve().parent / "fixtures" / "nvml_h100_recording.jsonl"
NODE = "bench-node-1"
POOL = "chat"
RAW_SECONDS = 900.0
SAMPLE_INTERVAL_S = 0.5
ROLLUP_HOURS = 24
CHROMIUM = "/usr/bin/chromium"
TARGET_LOAD_MS = 1000.0


progress = progress_line("page_weight")


def _series() -> list[tuple[int, str, tuple[str, ...]]]:
    """The node's series as the agent sends them: a row per GPU, the host's, the pool's; each with its metrics."""
    by_scope = {scope: tuple(m.name for m in METRICS if m.scope is scope) for scope in Scope}
    return [
        (0, NO_POOL, by_scope[Scope.GPU]),
        (1, NO_POOL, by_scope[Scope.GPU]),
        (NO_DEVICE, NO_POOL, by_scope[Scope.NODE]),
        (NO_DEVICE, POOL, by_scope[Scope.POOL_REPLICA]),
    ]


def _value(metric: str, t: float, device: int) -> float:
    """A plausible, moving value: a ratio between 0 and 1, other units around a typical level."""
    wave = 0.5 + 0.4 * math.sin(t / 97.0 + device)
    if BY_NAME[metric].is_ratio:
        return wave
    levels = {"bytes": 40e9, "watts": 400.0, "celsius": 60.0, "seconds": 0.05, "bytes_per_second": 2e6}
    return levels.get(BY_NAME[metric].unit, 20.0) * (0.5 + wave)


def seed(database_url: str, now: float) -> dict[str, int]:
    """What the charts read, written straight into storage (a day of rollups takes a day to make)."""
    raw_rows: list[dict[str, Any]] = []
    count = int(RAW_SECONDS / SAMPLE_INTERVAL_S)
    for k in range(count):
        t = now - RAW_SECONDS + k * SAMPLE_INTERVAL_S
        for device, pool, metrics in _series():
            row: dict[str, Any] = {m.name: None for m in METRICS}
            row.update({m: _value(m, t, device) for m in metrics})
            raw_rows.append(
                {
                    "node_id": NODE,
                    "seq": -(len(raw_rows) + 1),
                    "ts": t,
                    "device": device,
                    "pool": pool,
                    **row,
                    "extra": None,
                }
            )
    rollup_rows: list[dict[str, Any]] = []
    first_minute = math.floor(now / 60.0) * 60.0 - ROLLUP_HOURS * 3600.0
    for k in range(ROLLUP_HOURS * 60):
        bucket = first_minute + 60.0 * k
        for device, pool, metrics in _series():
            rollup: dict[str, Any] = {c.name: None for c in rollups_1m.columns}
            rollup.update(node_id=NODE, device=device, pool=pool, bucket=bucket, samples=120)
            for m in metrics:
                for stat in ROLLUP_STATS:
                    rollup[rollup_column(m, stat)] = _value(m, bucket, device)
            rollup_rows.append(rollup)
    engine = make_engine(database_url)
    try:
        with engine.begin() as conn:
            conn.execute(insert(samples), raw_rows)
            conn.execute(insert(rollups_1m), rollup_rows)
        points = [ForecastPoint(now + 60 * k, 30 + k, 25 + k, 35 + 2 * k) for k in range(1, 16)]
        forecast = GoodForecast(
            SubjectKind.POOL,
            POOL,
            "request_rate_per_second",
            now,
            "ets",
            now,
            60.0,
            900.0,
            now - 3600,
            now,
            points,
            {"probability": 0.2, "eta_seconds": None, "capacity": 60.0},
        )
        ForecastStore(engine).save([forecast])
    finally:
        engine.dispose()
    return {"raw_samples": len(raw_rows), "rollup_rows": len(rollup_rows)}


def measure(browser: Any, url: str, token: str, path: str, runs: int) -> dict[str, float]:
    """Medians over ``runs`` cold-cache loads of ``path``, signed in: the bytes that came in (over the wire and
    uncompressed), and the ms to the document's last byte, DOMContentLoaded (charts drawn) and the load event."""
    weights, decoded, ready, loaded, served = [], [], [], [], []
    for _ in range(runs):
        context = browser.new_context(viewport={"width": 1360, "height": 900}, base_url=url, bypass_csp=True)
        page = context.new_page()
        if path != "/login":
            page.goto("/login")
            page.fill("#token", token)
            page.click("button:has-text('Sign in')")
            page.wait_for_url("**/")
        page.goto(path, wait_until="load")
        # the browser's own figures: bytes as they came over the wire (gzip'd where the server compressed them)
        timing = page.evaluate(
            "() => { const n = performance.getEntriesByType('navigation')[0];"
            " const r = performance.getEntriesByType('resource');"
            " return [n.domContentLoadedEventEnd, n.loadEventEnd, n.responseEnd,"
            " n.encodedBodySize + r.reduce((s, e) => s + e.encodedBodySize, 0),"
            " n.decodedBodySize + r.reduce((s, e) => s + e.decodedBodySize, 0)]; }"
        )
        ready.append(float(timing[0]))
        loaded.append(float(timing[1]))
        served.append(float(timing[2]))
        weights.append(float(timing[3]))
        decoded.append(float(timing[4]))
        context.close()
    return {
        "kb": round(statistics.median(weights) / 1024, 1),
        "kb_uncompressed": round(statistics.median(decoded) / 1024, 1),
        "document_ms": round(statistics.median(served), 1),
        "dom_ready_ms": round(statistics.median(ready), 1),
        "load_ms": round(statistics.median(loaded), 1),
    }


def run(runs: int, quick: bool) -> dict[str, Any]:
    from playwright.sync_api import sync_playwright

    with tempfile.TemporaryDirectory() as tmp, ServerProcess(f"sqlite:///{tmp}/pages.db") as server:
        admin = {"Authorization": f"Bearer {server.admin_token}"}
        pool = {"name": POOL, "min_replicas": 1, "max_replicas": 4, "replica_capacity": 20.0}
        httpx.post(f"{server.url}/api/v1/pools", json=pool, headers=admin, timeout=10).raise_for_status()
        seeded = seed(server.database_url, time.time())
        progress(f"seeded {seeded['raw_samples']} raw samples and {seeded['rollup_rows']} rolled-up minutes")
        agent = AgentProcess(
            collector=server.url,
            token=server.create_agent_token(NODE),
            node_id=NODE,
            spool_dir=Path(tmp) / "spool",
            gpu_probe=f"replay:{RECORDING}:2",
            log_path=Path(tmp) / "agent.log",
        ).start()
        try:
            deadline = time.monotonic() + 60
            while not httpx.get(f"{server.url}/api/v1/nodes", headers=admin, timeout=10).json()["items"]:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{NODE} never reported:\n{agent.log_tail()}")
                time.sleep(0.2)
            pages = ["/", f"/nodes/{NODE}", "/pools", f"/pools/{POOL}", "/alerts"]
            if not quick:
                pages += [f"/nodes/{NODE}?range=24h", f"/pools/{POOL}?range=24h", "/tenants", "/health", "/settings"]
            with sync_playwright() as playwright:
                browser = playwright.chromium.launch(executable_path=CHROMIUM, headless=True, args=["--no-sandbox"])
                try:
                    baseline = measure(browser, server.url, server.admin_token, "/login", runs)
                    figures = {}
                    for path in pages:
                        figures[path] = measure(browser, server.url, server.admin_token, path, runs)
                        progress(f"{path}: {figures[path]}")
                finally:
                    browser.close()
        finally:
            agent.stop()
    slowest = max(figures, key=lambda p: figures[p]["load_ms"])
    return {
        "bench": "page_weight",
        "runs": runs,
        **seeded,
        "pages": figures,
        "node_page_kb": figures[f"/nodes/{NODE}"]["kb"],
        "node_page_load_ms": figures[f"/nodes/{NODE}"]["load_ms"],
        "slowest_page": slowest,
        "max_load_ms": figures[slowest]["load_ms"],
        "under_1s": all(f["load_ms"] < TARGET_LOAD_MS for f in figures.values()),
        "baseline": {"page": "/login", **baseline},
        "ratio": round(figures[slowest]["load_ms"] / baseline["load_ms"], 2),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.page_weight", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="five pages, one load each (within 60 s)")
    parser.add_argument("--runs", type=int, default=None, help="cold loads per page (default 5; --quick 1)")
    args = parser.parse_args(argv)
    runs = args.runs or (1 if args.quick else 5)
    print(json.dumps(run(runs, args.quick)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

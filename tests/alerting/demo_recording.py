"""Recorded demo traffic for the alert-pack tests: what the evaluator's gather read from a live ``fleetpilot demo``,
once a second, and its replay.

Recording (about 11 minutes; regenerates ``tests/alerting/data/demo_inputs.jsonl.gz``)::

    .venv/bin/python -m tests.alerting.demo_recording --seconds 600

runs ``fleetpilot demo`` in a fresh temporary folder (its own SQLite database) and, every second, calls
:func:`alerting.gather.gather` on that database with its enabled rules (the default pack), writing the
:class:`~alerting.inputs.Inputs` as one JSON line: times relative to the first tick, each windowed statistic keyed by
its rule's name (a rule id belongs to one database). Values are kept as measured (rounded to 6 significant digits).
"""

from __future__ import annotations

import argparse
import gzip
import json
import math
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, inspect, text
from sqlalchemy.exc import OperationalError

from alerting.gather import gather
from alerting.inputs import ForecastView, Inputs, PoolScaling, Reading, Throttle
from alerting.rule_store import RuleStore
from collector.database import make_engine
from fleet.view import FleetReader

FIXTURE = Path(__file__).parent / "data" / "demo_inputs.jsonl.gz"
FRESH_SECONDS = 3.0  # EvaluatorSettings' default
DOWN_AFTER_SECONDS = 3.0  # ServerSettings' default


@dataclass(frozen=True)
class Tick:
    at: float  # seconds since the first tick
    inputs: Inputs  # times shifted to the replay's start; ``windowed`` empty: it is by rule id, see below
    windowed: Mapping[str, Sequence[Reading]]  # by rule name


def _num(value: float) -> float:
    return float(f"{value:.6g}") if math.isfinite(value) else value


def _reading(r: Reading, t0: float) -> list[Any]:
    values = {k: _num(v) for k, v in sorted(r.values.items())}
    return [r.node, r.device, r.pool, round(r.ts - t0, 3), values, r.resolution_seconds]


def _encode(inputs: Inputs, names: Mapping[int, str], now: float, t0: float) -> dict[str, Any]:
    return {
        "at": round(now - t0, 3),
        "readings": [_reading(r, t0) for r in inputs.readings],
        "last_seen": {node: round(ts - t0, 3) for node, ts in inputs.node_last_seen.items()},
        "up": sorted(inputs.up_nodes),
        "windowed": {names[rid]: [_reading(r, t0) for r in rs] for rid, rs in inputs.windowed.items()},
        "forecasts": [
            [f.kind, f.subject, f.metric, f.probability, f.eta_seconds, f.horizon_seconds, f.error, f.warming_up]
            for f in inputs.forecasts
        ],
        "pools": [
            [p.pool, p.desired, p.ready, None if p.last_failed_ts is None else round(p.last_failed_ts - t0, 3)]
            for p in inputs.pools
        ],
        "throttles": [[t.tenant, t.node, t.pool, round(t.ts - t0, 3)] for t in inputs.throttles],
        "slo": dict(inputs.slo_p99_seconds),
    }


def _decoded_reading(row: Sequence[Any], t0: float) -> Reading:
    node, device, pool, ts, values, resolution = row
    return Reading(node, device, pool, t0 + ts, values, resolution)


def _decode(line: Mapping[str, Any], t0: float) -> Tick:
    inputs = Inputs(
        readings=[_decoded_reading(r, t0) for r in line["readings"]],
        node_last_seen={node: t0 + ts for node, ts in line["last_seen"].items()},
        up_nodes=frozenset(line["up"]),
        forecasts=[ForecastView(*f) for f in line["forecasts"]],
        pools=[PoolScaling(p, d, r, None if f is None else t0 + f) for p, d, r, f in line["pools"]],
        throttles=[Throttle(tenant, node, pool, t0 + ts) for tenant, node, pool, ts in line["throttles"]],
        slo_p99_seconds=line["slo"],
        fresh_seconds=FRESH_SECONDS,
    )
    windowed = {name: [_decoded_reading(r, t0) for r in rs] for name, rs in line["windowed"].items()}
    return Tick(line["at"], inputs, windowed)


def load(path: Path = FIXTURE, *, t0: float) -> list[Tick]:
    """The recording's ticks, its times shifted to start at ``t0``."""
    with gzip.open(path, "rt") as f:
        return [_decode(json.loads(line), t0) for line in f if line.strip()]


def _ticks(engine: Engine, seconds: float) -> Iterator[dict[str, Any]]:
    fleet = FleetReader(engine, node_down_after_seconds=DOWN_AFTER_SECONDS, cpu_replicas_per_node=4)
    t0 = time.time()
    while (now := time.time()) - t0 < seconds:
        rules = RuleStore(engine).list(enabled_only=True)
        try:
            with engine.connect() as conn:
                inputs = gather(conn, rules, now, fleet=fleet, fresh_seconds=FRESH_SECONDS)
        except OperationalError as exc:  # the demo's writer held the database past the busy timeout: skip a tick
            print(f"tick at {now - t0:.0f} s skipped: {exc}", file=sys.stderr)
        else:
            yield _encode(inputs, {r.id: r.spec.name for r in rules}, now, t0)
        time.sleep(max(0.0, 1.0 - (time.time() - now)))


def _wait_for_rules(engine: Engine, timeout_s: float = 120.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if "alert_rules" in inspect(engine).get_table_names() and RuleStore(engine).list():
                return
        except OperationalError:
            pass
        time.sleep(0.5)
    raise RuntimeError("the demo's database has no alert rules after 120 s")


def _print_alerts(engine: Engine) -> None:
    """What the demo's own evaluator raised meanwhile (for the pack's review in docs/operations.md)."""
    with engine.connect() as conn:
        for row in conn.execute(text("SELECT labels, status, active_since, fired_at, resolved_at FROM alerts")):
            print(*row, sep="\t")


def record(seconds: float, out: Path) -> None:
    with tempfile.TemporaryDirectory(prefix="fleetpilot-demo-") as folder:
        demo = subprocess.Popen([str(Path(sys.executable).with_name("fleetpilot")), "demo"], cwd=folder)
        try:
            engine = make_engine(f"sqlite:///{folder}/.fleetpilot/fleetpilot.db")
            _wait_for_rules(engine)
            out.parent.mkdir(parents=True, exist_ok=True)
            with gzip.open(out, "wt") as f:
                for line in _ticks(engine, seconds):
                    f.write(json.dumps(line, separators=(",", ":")) + "\n")
            _print_alerts(engine)
        finally:
            demo.terminate()
            demo.wait(timeout=120)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=600.0)
    parser.add_argument("--out", type=Path, default=FIXTURE)
    args = parser.parse_args()
    record(args.seconds, args.out)


if __name__ == "__main__":
    main()

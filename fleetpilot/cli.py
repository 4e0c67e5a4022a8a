"""``fleetpilot`` command line (CONTRACT section 3). Heavy imports happen inside the subcommand that needs them, so
the agent's install never loads the server's dependencies."""

from __future__ import annotations

import argparse
import logging
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

from pydantic import ValidationError

from fleetpilot.settings import ServerSettings

Handler = Callable[[argparse.Namespace], int]


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    handler: Handler | None = getattr(args, "handler", None)
    if handler is None:
        parser.print_help()
        return 2
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    for chatty in ("httpx", "apscheduler"):  # a line per request or job run would bury what matters
        logging.getLogger(chatty).setLevel(logging.WARNING)
    try:
        return handler(args)
    except ValidationError as exc:
        print(f"fleetpilot: invalid settings:\n{_settings_errors(exc)}", file=sys.stderr)
        return 2


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="fleetpilot", description="Control plane for GPU inference fleets.")
    commands = parser.add_subparsers(title="commands", metavar="COMMAND")

    server = commands.add_parser("server", help="run the control plane (ingest, API, /metrics, background jobs)")
    _server_flags(server)
    server.set_defaults(handler=run_server)

    agent = commands.add_parser("agent", help="run the node daemon: sample the 12 metrics and push them")
    _agent_flags(agent)
    agent.set_defaults(handler=run_agent)

    demo = commands.add_parser("demo", help="run the whole system on this machine (what `make demo` runs)")
    demo.add_argument("--port", type=int, default=None, help="port of the dashboard and API (default: a free one)")
    demo.set_defaults(handler=run_demo)

    db = commands.add_parser("db", help="database maintenance")
    db_commands = db.add_subparsers(title="commands", metavar="COMMAND", required=True)
    upgrade = db_commands.add_parser("upgrade", help="apply the Alembic migrations up to head")
    _database_flag(upgrade)
    upgrade.set_defaults(handler=run_db_upgrade)

    token = commands.add_parser("token", help="API tokens")
    token_commands = token.add_subparsers(title="commands", metavar="COMMAND", required=True)
    create = token_commands.add_parser("create", help="create a token; prints it once, alone on the last line")
    create.add_argument("--role", required=True, choices=["admin", "operator", "viewer", "agent"])
    create.add_argument("--node", default=None, help="the node an agent token may ingest for (agent role only)")
    create.add_argument("--name", default="", help="a label to recognise the token by")
    _database_flag(create)
    create.set_defaults(handler=run_token_create)

    backtest = commands.add_parser(
        "backtest", help="rolling-origin forecast evaluation of a series: forecasts.csv, summary.json, report.html"
    )
    _backtest_flags(backtest)
    backtest.set_defaults(handler=run_backtest)
    simulate = commands.add_parser(
        "simulate", help="replay a demand trace through a scaling policy: decisions.csv, summary.json"
    )
    _simulate_flags(simulate)
    simulate.set_defaults(handler=run_simulate)
    return parser


def _database_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--database-url",
        default=None,
        help="SQLAlchemy URL (default: FLEETPILOT_DATABASE_URL or sqlite:///./.fleetpilot/fleetpilot.db)",
    )


def _server_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--host", default=None, help="address to listen on (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=None, help="port to listen on (default 8080)")
    _database_flag(parser)


def _agent_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--collector", default=None, help="collector base URL (or FLEETPILOT_COLLECTOR)")
    parser.add_argument("--token", default=None, help="this node's agent token (or FLEETPILOT_TOKEN)")
    parser.add_argument("--node-id", default=None, help="node identifier (default: the hostname)")
    parser.add_argument(
        "--workload",
        default=None,
        help="none; builtin (run the torch replicas of --pools and serve them on --serve-port); "
        "or an external engine's metrics URL: vllm=URL, tgi=URL, triton=URL",
    )
    parser.add_argument("--pool", default=None, help="pool the external engine serves (default: the engine kind)")
    parser.add_argument("--gpu-probe", default=None, help="auto (NVML if present), nvml, none, or replay:PATH[:GPUS]")
    parser.add_argument(
        "--spool-dir", default=None, help="where unacknowledged samples wait (default ./.fleetpilot/agent-spool)"
    )
    parser.add_argument("--metrics-host", default=None, help="address of the agent's /metrics (default 127.0.0.1)")
    parser.add_argument("--metrics-port", type=int, default=None, help="port of the agent's /metrics (default 9401)")
    parser.add_argument(
        "--serve-port", type=int, default=None, help="port of the built-in workload's serving API (default 8100)"
    )
    parser.add_argument("--serve-host", default=None, help="address of the serving API (default 127.0.0.1)")
    parser.add_argument(
        "--pools",
        default=None,
        help="built-in pools until the control plane says otherwise: NAME=KIND:REPLICAS,... with KIND text or "
        "classify (default text-small=text:1)",
    )


def run_agent(args: argparse.Namespace) -> int:
    from inference_agent.daemon import Agent, open_probes
    from inference_agent.settings import AgentSettings

    names = (
        "collector",
        "token",
        "node_id",
        "workload",
        "pool",
        "gpu_probe",
        "spool_dir",
        "metrics_host",
        "metrics_port",
        "serve_host",
        "serve_port",
        "pools",
    )
    flags = {name: getattr(args, name) for name in names if getattr(args, name) is not None}
    settings = AgentSettings(**flags)
    return Agent(settings, open_probes(settings)).run()


def _settings(args: argparse.Namespace, **overrides: Any) -> ServerSettings:
    flags = {name: getattr(args, name, None) for name in ("host", "port", "database_url")}
    flags.update(overrides)
    return ServerSettings(**{k: v for k, v in flags.items() if v is not None})


def _settings_errors(exc: ValidationError) -> str:
    return "\n".join(f"  {'.'.join(str(p) for p in e['loc']) or 'settings'}: {e['msg']}" for e in exc.errors())


def run_db_upgrade(args: argparse.Namespace) -> int:
    from migrations import runner

    settings = _settings(args)
    runner.upgrade(settings.database_url)
    print(f"database at head: {settings.database_url}")
    return 0


def run_token_create(args: argparse.Namespace) -> int:
    from collector.database import make_engine
    from migrations import runner
    from web.tokens import Role, TokenStore

    settings = _settings(args)
    role = Role(args.role)
    if (role is Role.AGENT) != (args.node is not None):
        print("fleetpilot: --node is required for --role agent and allowed only there", file=sys.stderr)
        return 2
    if settings.database_url.startswith("sqlite"):
        runner.upgrade(settings.database_url)
    engine = make_engine(settings.database_url)
    info, clear = TokenStore(engine).create(role, now=time.time(), name=args.name, node_id=args.node)
    engine.dispose()
    print(f"created {info.role.value} token {info.id} ({info.name}); it is shown only once:")
    print(clear)
    return 0


def run_server(args: argparse.Namespace) -> int:
    import uvicorn

    from fleetpilot.server import bootstrap_admin, build_services, prepare_database, server_app

    settings = _settings(args)
    prepare_database(settings)
    services = build_services(settings)
    admin_token = bootstrap_admin(services)
    print(f"fleetpilot server on http://{settings.host}:{settings.port}/ (API docs at /docs)", flush=True)
    if admin_token is not None:
        print(f"First start: created an admin token; it is shown only once.\nAdmin token: {admin_token}", flush=True)
    uvicorn.run(server_app(services), host=settings.host, port=settings.port, log_level="warning")
    return 0


def run_demo(args: argparse.Namespace) -> int:
    from fleetpilot.demo import run_demo as demo
    from fleetpilot.launch import free_port

    return demo(_settings(args, host="127.0.0.1", port=args.port or free_port()))


def _backtest_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("series", metavar="SERIES.csv", help="a header, then rows timestamp,value")
    parser.add_argument("--horizon", default="15m", help="how far ahead, in time: 900s, 15m, 1h (default 15m)")
    parser.add_argument("--out", required=True, help="directory for forecasts.csv, summary.json and report.html")
    parser.add_argument(
        "--model",
        default=None,
        help="forecaster name (default auto: per-series smoothing picked by recent rolling-origin error, a few "
        "seconds for a 2,000-row series)",
    )
    parser.add_argument(
        "--warmup", type=int, default=None, help="warm-up in steps, at most half the series (default: 2 days)"
    )
    parser.add_argument("--seed", type=int, default=0, help="seed of the forecaster (default 0)")
    parser.add_argument(
        "--refit-every",
        type=int,
        default=1,
        help="refit every K origins and update in between, for forecasters that implement update(); "
        "every other forecaster is refitted at every origin (default 1)",
    )


def run_backtest(args: argparse.Namespace) -> int:
    """Rolling-origin backtest (CONTRACT section 7); bad input or an unknown model → exit 2 with the reason."""
    from pathlib import Path

    from predictor.backtest import BacktestError, backtest, parse_duration, plan_backtest
    from predictor.cycle import DEFAULT_MODEL
    from predictor.registry import FORECASTER_NAMES, make_forecaster
    from predictor.report import write_outputs
    from predictor.series_csv import SeriesCsvError, read_series_csv

    known = list(FORECASTER_NAMES)
    model = args.model or (DEFAULT_MODEL if DEFAULT_MODEL in known else "naive")
    if model not in known:
        print(f"fleetpilot: unknown model {model!r}; known models: {', '.join(known)}", file=sys.stderr)
        return 2
    try:
        series = read_series_csv(Path(args.series))
        history = series.history
        plan = plan_backtest(len(history), history.step_seconds, parse_duration(args.horizon), args.warmup)
    except (SeriesCsvError, BacktestError) as exc:
        print(f"fleetpilot: {exc}", file=sys.stderr)
        return 2
    started = time.perf_counter()
    with _ProgressBar(f"backtest {model}") as bar:
        forecaster = make_forecaster(model, seed=args.seed)
        refit_every = max(1, args.refit_every)
        result = backtest(forecaster, history, plan, refit_every=refit_every, on_progress=bar.update, model=model)
    runtime_s = round(time.perf_counter() - started, 3)
    summary = write_outputs(result, series.labels, Path(args.out), {"runtime_s": runtime_s})
    alarm = summary["saturation"]["model"]
    print(
        f"{model}: MASE {summary['mase']}, sMAPE {summary['smape']}, coverage90 {summary['coverage90']}, "
        f"saturation F1 {alarm['f1']} over "
        f"{summary['origins']} origins × {summary['horizon_steps']} steps in {runtime_s} s; wrote {args.out}"
    )
    return 0


def _simulate_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("series", metavar="SERIES.csv", help="demand per step: a header, then rows timestamp,value")
    parser.add_argument(
        "--capacity-per-replica", type=float, required=True, help="demand one replica serves, same unit as the trace"
    )
    parser.add_argument("--startup", default="3m", help="time for a new replica to become ready (default 3m)")
    parser.add_argument(
        "--policy", default="hybrid", help="static, reactive, predictive, hybrid or oracle (default hybrid)"
    )
    parser.add_argument("--out", required=True, help="directory for decisions.csv and summary.json")
    parser.add_argument(
        "--compare", action="store_true", help="also run every policy and the oracle; print and write comparison.json"
    )
    parser.add_argument("--min-replicas", type=int, default=1, help="default 1")
    parser.add_argument("--max-replicas", type=int, default=10_000, help="default 10000")
    parser.add_argument("--target-utilization", type=float, default=None, help="reactive target (default 0.7)")
    parser.add_argument(
        "--predictive-utilization", type=float, default=None, help="predictive load on the upper bound (default 0.9)"
    )
    parser.add_argument("--margin", default=None, help="predictive look-ahead past the startup (default 60s)")
    parser.add_argument("--static-replicas", type=int, default=None, help="static count (default: the trace's peak)")
    parser.add_argument("--model", default="auto", help="forecaster of the predictive policies (default auto)")


def run_simulate(args: argparse.Namespace) -> int:
    """Autoscaling evaluation (CONTRACT section 8); bad input → exit 2 with the reason."""
    import dataclasses
    import json
    from pathlib import Path

    from autoscaler.policy import PolicySettings
    from autoscaler.simulate import SIMULATED_POLICIES, SimulationSettings, simulate, summary, write_outputs
    from predictor.backtest import BacktestError, parse_duration
    from predictor.base import Forecast, History
    from predictor.registry import FORECASTER_NAMES, make_forecaster
    from predictor.series_csv import SeriesCsvError, read_series_csv

    if args.policy not in SIMULATED_POLICIES or args.model not in FORECASTER_NAMES:
        print(
            f"fleetpilot: unknown policy {args.policy!r} or model {args.model!r}; policies: "
            f"{', '.join(SIMULATED_POLICIES)}; models: {', '.join(FORECASTER_NAMES)}",
            file=sys.stderr,
        )
        return 2
    try:
        series = read_series_csv(Path(args.series))
        knobs: dict[str, Any] = {
            name: value
            for name, value in (
                ("target_utilization", args.target_utilization),
                ("predictive_utilization", args.predictive_utilization),
                ("margin_seconds", None if args.margin is None else parse_duration(args.margin)),
                ("static_replicas", args.static_replicas),
            )
            if value is not None
        }
        settings = SimulationSettings(
            capacity_per_replica=args.capacity_per_replica,
            startup_seconds=0.0 if args.startup.strip() in {"0", "0s", "0m"} else parse_duration(args.startup),
            min_replicas=args.min_replicas,
            max_replicas=args.max_replicas,
            policy=dataclasses.replace(PolicySettings(), **knobs),
        )
    except (SeriesCsvError, BacktestError, ValueError) as exc:
        print(f"fleetpilot: {exc}", file=sys.stderr)
        return 2
    model = args.model

    def forecast(history: History, horizon: int) -> Forecast:
        return make_forecaster(model).fit(history).predict(horizon)

    out = Path(args.out)
    result = simulate(series.history, args.policy, settings, forecast=forecast)
    body = write_outputs(result, settings.capacity_per_replica, out, series.labels)
    print(json.dumps(body))
    if args.compare:
        rows = [
            summary(simulate(series.history, name, settings, forecast=forecast), settings.capacity_per_replica)
            for name in SIMULATED_POLICIES
        ]
        (out / "comparison.json").write_text(json.dumps(rows, indent=2) + "\n")
        print(f"{'policy':<12}{'replica-hours':>15}{'attainment':>12}{'scale events':>14}")
        for row in rows:
            attained = "n/a" if row["slo_attainment"] is None else f"{row['slo_attainment']:.4f}"
            print(f"{row['policy']!s:<12}{row['replica_hours']:>15.2f}{attained:>12}{row['scale_events']:>14}")
    return 0


class _ProgressBar:
    """A one-line bar on stderr, shown once a run has taken 1 s; redrawn at most every 0.2 s (5 s off a
    terminal, so a log gets a line every 5 s, not a line per origin)."""

    def __init__(self, label: str, width: int = 30) -> None:
        self.label, self.width = label, width
        self.interactive = sys.stderr.isatty()
        self.every_s = 0.2 if self.interactive else 5.0
        self.started = self.drawn = time.perf_counter()
        self.shown = False

    def __enter__(self) -> _ProgressBar:
        return self

    def __exit__(self, *exc: object) -> None:
        if self.shown and self.interactive:
            print(file=sys.stderr, flush=True)

    def update(self, done: int, total: int) -> None:
        now = time.perf_counter()
        if now - self.started < 1.0 or (now - self.drawn < self.every_s and done < total):
            return
        self.drawn, self.shown = now, True
        filled = self.width * done // max(total, 1)
        bar = "#" * filled + "." * (self.width - filled)
        elapsed = now - self.started
        eta = elapsed * (total - done) / max(done, 1)  # 100 of 1,700 origins in 10 s → 160 s to go
        line = f"{self.label} [{bar}] {done}/{total} origins, {elapsed:.0f} s, about {eta:.0f} s to go"
        print(
            ("\r" if self.interactive else "") + line, end="" if self.interactive else "\n", file=sys.stderr, flush=True
        )


if __name__ == "__main__":
    sys.exit(main())

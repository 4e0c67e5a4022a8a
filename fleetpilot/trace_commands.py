"""The trace-driven commands: ``backtest`` (CONTRACT section 7), ``simulate`` (section 8) and ``replay``, each
reading a trace from disk; heavy imports happen inside the command that needs them."""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from typing import Any

from fleetpilot.progress import ProgressBar
from fleetpilot.token_flags import TENANT_KEYS_VARIABLE, add_token_flags, tenant_keys_from, token_from


def add_trace_commands(commands: Any) -> None:
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
    replay = commands.add_parser(
        "replay", help="drive a trace at agents' serving APIs (progress bar; counts and latency at the end)"
    )
    _replay_flags(replay)
    replay.set_defaults(handler=run_replay)


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
    with ProgressBar(f"backtest {model}") as bar:
        forecaster = make_forecaster(model, seed=args.seed)
        refit_every = max(1, args.refit_every)
        result = backtest(forecaster, history, plan, refit_every=refit_every, on_progress=bar.update, model=model)
    runtime_s = round(time.perf_counter() - started, 3)
    extras = {"runtime_s": runtime_s, "series": Path(args.series).name}
    summary = write_outputs(result, series.labels, Path(args.out), extras)
    print("\n".join(backtest_lines(summary, history.step_seconds, args.out)))
    return 0


def backtest_lines(summary: dict[str, Any], step_seconds: float, out: str) -> list[str]:
    """What ``fleetpilot backtest`` prints: the scores rounded as people read them, and what MASE means."""
    from predictor.svg_chart import duration_words, human_number

    def score(value: float | None, kind: str = "") -> str:
        if value is None:
            return "not measured"
        return f"{100 * value:.1f} %" if kind == "share" else f"{value:.1f} %" if kind == "percent" else f"{value:.3f}"

    steps = summary["horizon_steps"]
    baselines = ", ".join(f"{name.replace('_', ' ')} {score(b['mase'])}" for name, b in summary["baselines"].items())
    alarm, naive = summary["saturation"]["model"], summary["saturation"]["naive"]
    return [
        f"{summary['model']} on {summary['series']}, {duration_words(steps * step_seconds)} ahead ({steps} steps of "
        f"{duration_words(step_seconds)}), {summary['origins']:,} origins in {summary['runtime_s']} s",
        f"  MASE {score(summary['mase'])} (mean error ÷ the naive one-step error: under 1 beats repeating the last "
        f"value; baselines: {baselines})",
        f"  sMAPE {score(summary['smape'], 'percent')}, 90 % band covering {score(summary['coverage90'], 'share')} "
        f"of the actuals, saturation alarm F1 {score(alarm['f1'])} (naive {score(naive['f1'])}) over "
        f"{summary['saturation']['events']:,} events above {human_number(summary['saturation']['threshold'])}",
        f"  wrote {out}/report.html, summary.json and forecasts.csv",
    ]


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
        "--predictive-utilization", type=float, default=None, help="predictive load on the forecast bound (default 1)"
    )
    parser.add_argument(
        "--attainment-target",
        default=None,
        help="predictive: the attainment its bound is sized and adapted for (default 0.99; 'none': the band's 95 %% "
        "bound)",
    )
    parser.add_argument("--margin", default=None, help="predictive look-ahead past the startup (default 60s)")
    parser.add_argument("--static-replicas", type=int, default=None, help="static count (default: the trace's peak)")
    parser.add_argument("--model", default="auto", help="forecaster of the predictive policies (default auto)")


def attainment_target(text: str) -> float | None:
    """``--attainment-target``: a share, or ``none`` (None: the forecast band's fixed bound)."""
    if text.strip().lower() == "none":
        return None
    try:
        return float(text)
    except ValueError:
        raise ValueError(f"--attainment-target: a share like 0.99 or 'none', got {text!r}") from None


def _rolling_forecast(model: str, settings: Any) -> Callable[[Any, int], Any]:
    """One forecaster carried from step to step (``auto`` keeps scoring its candidates as the trace goes, at the
    policy's attainment target and startup, as the forecast loop does for a pool)."""
    from autoscaler.simulate import startup_steps
    from predictor.backends.auto import DEFAULT_LEVEL, Auto
    from predictor.registry import make_forecaster
    from predictor.rolling import absorb

    state: dict[str, Any] = {}

    def forecast(history: Any, horizon: int) -> Any:
        if "model" not in state:
            level = settings.policy.attainment_target or DEFAULT_LEVEL
            steps = max(1, startup_steps(settings.startup_seconds, history.step_seconds))
            state["model"] = Auto(level, steps) if model == "auto" else make_forecaster(model)
            return state["model"].fit(history).predict(horizon)
        return absorb(state["model"], history).predict(horizon)

    return forecast


def run_simulate(args: argparse.Namespace) -> int:
    """Autoscaling evaluation (CONTRACT section 8); bad input → exit 2 with the reason."""
    import dataclasses
    import json
    from pathlib import Path

    from autoscaler.policy.settings import PolicySettings
    from autoscaler.simulate import SIMULATED_POLICIES, SimulationSettings, simulate, summary, write_outputs
    from autoscaler.simulate_report import render_report
    from predictor.backtest import BacktestError, parse_duration
    from predictor.registry import FORECASTER_NAMES
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
        if args.attainment_target is not None:
            knobs["attainment_target"] = attainment_target(args.attainment_target)
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
    forecast = _rolling_forecast(args.model, settings)

    out = Path(args.out)
    result = simulate(series.history, args.policy, settings, forecast=forecast)
    body = write_outputs(result, settings.capacity_per_replica, out, series.labels)
    print(json.dumps(body))
    runs = {args.policy: result}
    if args.compare:
        runs |= {
            name: simulate(series.history, name, settings, forecast=forecast)
            for name in SIMULATED_POLICIES
            if name != args.policy
        }
    page = render_report(runs, settings.capacity_per_replica, Path(args.series).name, settings.startup_seconds)
    (out / "report.html").write_text(page, encoding="utf-8")
    if args.compare:
        rows = [summary(runs[name], settings.capacity_per_replica) for name in SIMULATED_POLICIES]
        (out / "comparison.json").write_text(json.dumps(rows, indent=2) + "\n")
        print(f"{'policy':<12}{'replica-hours':>15}{'attainment':>12}{'scale events':>14}")
        for row in rows:
            attained = "n/a" if row["slo_attainment"] is None else f"{row['slo_attainment']:.4f}"
            print(f"{row['policy']!s:<12}{row['replica_hours']:>15.2f}{attained:>12}{row['scale_events']:>14}")
    return 0


def _replay_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "trace",
        metavar="TRACE",
        help="a request trace (TIMESTAMP,ContextTokens,GeneratedTokens) "
        "or a demand series (timestamp,value: requests per step), as under data/traces/",
    )
    parser.add_argument(
        "--server",
        action="append",
        required=True,
        help="an agent's serving URL (http://HOST:SERVE_PORT); repeat to take several in turn",
    )
    add_token_flags(
        parser,
        token_file_help="a file holding the bearer token of a gateway in front of the agents (or FLEETPILOT_TOKEN)",
    )
    parser.add_argument("--speed", type=float, default=1.0, help="trace seconds played per second (default 1)")
    parser.add_argument(
        "--scale-tokens",
        type=float,
        default=None,
        help="divide the trace's token counts by K (default 8, for the small built-in model)",
    )
    parser.add_argument("--duration", type=float, default=None, help="stop after S seconds of replay")
    parser.add_argument("--loop", action="store_true", help="play the trace again until --duration or --limit")
    parser.add_argument("--limit", type=int, default=None, help="send at most N requests")
    parser.add_argument("--pool", default="chat", help="the pool (the request's model) (default chat)")
    parser.add_argument(
        "--tenant",
        action="append",
        default=None,
        help="tenant of the requests; repeat to take several in turn (default: the tenants with a key, else "
        "default, the agents' anonymous tenant)",
    )
    parser.add_argument(
        "--tenant-key",
        action="append",
        default=None,
        metavar="NAME=@PATH",
        help="a file holding the API key tenant NAME sends (POST /api/v1/tenants/NAME/keys makes one); repeatable; "
        f"or {TENANT_KEYS_VARIABLE}=NAME=KEY,... in the environment, never a key on the command line (ps shows "
        "it). A tenant without a key is anonymous to the agents",
    )
    parser.add_argument(
        "--endpoint",
        choices=["completions", "classify"],
        default="completions",
        help="POST /v1/completions (default) or /v1/classify",
    )
    parser.add_argument("--prompt-tokens", type=int, default=64, help="prompt size for a demand series (default 64)")
    parser.add_argument("--max-tokens", type=int, default=32, help="tokens generated for a demand series (default 32)")
    parser.add_argument("--concurrency", type=int, default=64, help="requests in flight at most (default 64)")
    parser.add_argument("--timeout", type=float, default=120.0, help="seconds to wait for an answer (default 120)")


def run_replay(args: argparse.Namespace) -> int:
    """Replay a trace open-loop at the serving APIs; bad input → exit 2 with the reason, no answer at all → 1."""
    from pathlib import Path

    from replay import driver
    from replay.trace_load import TOKEN_SCALE

    try:
        tenant_keys = tenant_keys_from(args.tenant_key or ())
        token = token_from(args.token_file)
        options = driver.ReplayOptions(
            servers=tuple(args.server),
            pool=args.pool,
            tenants=tuple(args.tenant or tenant_keys or ("default",)),
            endpoint=driver.Endpoint(args.endpoint),
            speed=args.speed,
            duration_s=args.duration,
            loop=args.loop,
            limit=args.limit,
        )
        scale = TOKEN_SCALE if args.scale_tokens is None else args.scale_tokens
        trace = driver.read_trace(
            Path(args.trace), scale_tokens=scale, series_tokens=(args.prompt_tokens, args.max_tokens)
        )
    except ValueError as exc:  # ReplayError, an unreadable --token-file, a tenant key on the command line
        print(f"fleetpilot: {exc}", file=sys.stderr)
        return 2
    plan = driver.schedule(trace, options)
    print(
        f"replaying {len(plan)} requests of {args.trace} over {plan[-1].at_s if plan else 0:.0f} s "
        f"at {len(options.servers)} server(s)",
        file=sys.stderr,
        flush=True,
    )
    sender = driver.HttpSender(
        options.pool, options.endpoint, token=token, tenant_keys=tenant_keys, timeout_s=args.timeout
    )
    try:
        with ProgressBar("replay", unit="answered") as bar:
            result = driver.run_replay(plan, sender, concurrency=args.concurrency, on_progress=bar.update)
    finally:
        sender.close()
    summary = driver.summarize(plan, result)
    print("\n".join(summary.lines()), flush=True)
    return 1 if summary.sent and summary.errors == summary.sent else 0

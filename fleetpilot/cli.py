"""``fleetpilot`` command line (CONTRACT section 3). Heavy imports happen inside the subcommand that needs them, so
the agent's install never loads the server's dependencies."""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from collector.errors import DatabaseCorrupt
from fleetpilot.logs import configure_logging
from fleetpilot.settings import ServerSettings
from fleetpilot.token_flags import add_token_flags
from fleetpilot.trace_commands import add_trace_commands

Handler = Callable[[argparse.Namespace], int]
EXIT_DATABASE_CORRUPT = 65  # sysexits EX_DATAERR: systemd's RestartPreventExitStatus=65 stops the restarts


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    handler: Handler | None = getattr(args, "handler", None)
    if handler is None:
        parser.print_help()
        return 2
    configure_logging()
    try:
        return handler(args)
    except ValidationError as exc:
        print(f"fleetpilot: invalid settings:\n{_settings_errors(exc)}", file=sys.stderr)
        return 2
    except DatabaseCorrupt as exc:  # one clear line and an exit a supervisor need not retry, not a traceback loop
        print(f"fleetpilot: {exc}", file=sys.stderr)
        return EXIT_DATABASE_CORRUPT


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
    create.add_argument("--role", required=True, choices=["admin", "operator", "viewer", "agent", "remote_write"])
    create.add_argument("--node", default=None, help="the node an agent token may ingest for (agent role only)")
    create.add_argument("--name", default="", help="a label to recognise the token by")
    create.add_argument(
        "--node-scope",
        default=None,
        help="remote_write only: comma-separated node-name globs it may write (e.g. 'team-a-*'); default any node",
    )
    _database_flag(create)
    create.set_defaults(handler=run_token_create)

    add_trace_commands(commands)
    _alerts_commands(commands)
    return parser


def _alerts_commands(commands: Any) -> None:
    alerts = commands.add_parser("alerts", help="alert rules")
    alert_commands = alerts.add_subparsers(title="commands", metavar="COMMAND", required=True)
    export = alert_commands.add_parser(
        "export-rules", help="write the threshold rules as a Prometheus rule file (valid for promtool check rules)"
    )
    export.add_argument("--out", default=None, help="the file to write (default: stdout)")
    _database_flag(export)
    export.set_defaults(handler=run_alerts_export)


def run_alerts_export(args: argparse.Namespace) -> int:
    """The stored threshold rules (the default pack on a database that never had a server) as Prometheus rules."""
    from pathlib import Path

    from alerting.export import export_rules
    from alerting.rule_store import RuleStore
    from collector.database import make_engine
    from migrations import runner

    settings = _settings(args)
    if settings.database_url.startswith("sqlite"):
        runner.upgrade(settings.database_url)
    engine = make_engine(settings.database_url)
    try:
        store = RuleStore(engine)
        store.seed_defaults(now=time.time())
        exported = export_rules(store.list())
    finally:
        engine.dispose()
    if args.out is None:
        sys.stdout.write(exported.text)
    else:
        Path(args.out).write_text(exported.text)
        print(f"wrote {exported.exported} rules to {args.out} ({len(exported.skipped)} not exportable, named there)")
    return 0


def _database_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--database-url",
        default=None,
        help="SQLAlchemy URL (default: FLEETPILOT_DATABASE_URL or sqlite:///./.fleetpilot/fleetpilot.db)",
    )


def _server_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--host", default=None, help="address to listen on (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=None, help="port to listen on (default 8080)")
    parser.add_argument(
        "--keda-port",
        type=int,
        default=None,
        help="serve KEDA's external scaler (gRPC) on this port (default: off; FLEETPILOT_KEDA_PORT)",
    )
    parser.add_argument(
        "--remote-write-mapping",
        type=Path,
        default=None,
        help="YAML (or .toml) mapping Prometheus series to nodes, GPUs, pools and metrics for /api/v1/write and OTLP "
        "(default: the shipped dcgm-exporter, node-exporter, vLLM, SGLang, TGI and Triton mapping; "
        "FLEETPILOT_REMOTE_WRITE_MAPPING)",
    )
    parser.add_argument(
        "--workers",
        type=int,
        default=None,
        help="ingest/API processes on the port (default: the cores on PostgreSQL, 1 on SQLite; FLEETPILOT_WORKERS)",
    )
    _database_flag(parser)


def _agent_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--collector", default=None, help="collector base URL (or FLEETPILOT_COLLECTOR)")
    add_token_flags(
        parser,
        token_file_help="a file holding this node's agent token, re-read when it changes (or FLEETPILOT_TOKEN_FILE; "
        "the token itself may come in FLEETPILOT_TOKEN, never as a flag)",
    )
    parser.add_argument("--node-id", default=None, help="node identifier (default: the hostname)")
    parser.add_argument(
        "--workload",
        default=None,
        help="none; builtin (run the torch replicas of --pools and serve them on --serve-port); "
        "or one external engine's metrics URL: vllm=URL, sglang=URL, tgi=URL, triton=URL, llamacpp=URL",
    )
    parser.add_argument(
        "--engine",
        action="append",
        default=None,
        metavar="POOL=KIND=URL",
        help="an engine this node runs outside fleetpilot, read as pool POOL: KIND vllm, sglang, tgi, triton or "
        "llamacpp, URL its /metrics; repeatable",
    )
    parser.add_argument(
        "--config",
        default=None,
        metavar="PATH",
        help="this node's config file (TOML or YAML): its labels, the engine profiles it may run, engines it reads",
    )
    parser.add_argument("--pool", default=None, help="pool the external engine serves (default: the engine kind)")
    parser.add_argument("--gpu-probe", default=None, help="auto (NVML if present), nvml, none, or replay:PATH[:GPUS]")
    parser.add_argument(
        "--kubernetes-pods",
        action="store_true",
        default=None,
        help="in a pod: read the engines of the pods on node --node-id that carry fleetpilot.io/ annotations, and "
        "name the pod using each GPU (or FLEETPILOT_KUBERNETES_PODS)",
    )
    parser.add_argument(
        "--pod-resources-socket",
        default=None,
        metavar="PATH",
        help="the kubelet's pod-resources socket (default /var/lib/kubelet/pod-resources/kubelet.sock)",
    )
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
        "--serve-tenant-header",
        default=None,
        help="behind a gateway that authenticates tenants: the header it names the tenant in (e.g. X-Tenant), "
        "believed only from --serve-trusted-gateway; without it the tenant is named by its key alone",
    )
    parser.add_argument(
        "--serve-trusted-gateway",
        action="append",
        default=None,
        metavar="ADDRESS_OR_CIDR",
        help="an address or network (10.0.0.0/24) whose --serve-tenant-header is believed; repeatable",
    )
    parser.add_argument(
        "--pools",
        default=None,
        help="built-in pools until the control plane says otherwise: NAME=KIND:REPLICAS,... with KIND text or "
        "classify (default text-small=text:1)",
    )


def run_agent(args: argparse.Namespace) -> int:
    from inference_agent.config import AgentConfig
    from inference_agent.daemon import Agent, open_probes, read_engines
    from inference_agent.heap import settle_heap
    from inference_agent.serving.frontend.tenant_identity import GatewayTrust
    from inference_agent.settings import AgentSettings

    names = (
        "collector",
        "token_file",
        "node_id",
        "workload",
        "pool",
        "gpu_probe",
        "kubernetes_pods",
        "pod_resources_socket",
        "spool_dir",
        "metrics_host",
        "metrics_port",
        "serve_host",
        "serve_port",
        "serve_tenant_header",
        "pools",
    )
    flags = {name: getattr(args, name) for name in names if getattr(args, name) is not None}
    if args.serve_trusted_gateway:
        flags["serve_trusted_gateways"] = args.serve_trusted_gateway
    if args.engine:
        flags["engines"] = args.engine
    if args.config is not None:
        flags["config"] = args.config
    settings = AgentSettings(**flags)
    try:
        GatewayTrust.parse(settings.serve_tenant_header, settings.serve_trusted_gateways)
    except ValueError as exc:
        print(f"fleetpilot: --serve-trusted-gateway: {exc}", file=sys.stderr)
        return 2
    try:
        config = AgentConfig.load(settings.config) if settings.config is not None else AgentConfig()
        read_engines(settings, config)
    except ValueError as exc:  # ConfigError too
        print(f"fleetpilot agent: {exc}", file=sys.stderr)
        return 2
    from inference_agent.kube.api_client import KubeApiError

    try:
        probes = open_probes(settings, config)
    except KubeApiError as exc:  # --kubernetes-pods outside a pod
        print(f"fleetpilot agent: --kubernetes-pods: {exc}", file=sys.stderr)
        return 2
    agent = Agent(settings, probes, config=config)
    settle_heap()  # the imports and the agent built here live as long as it: full collections need not walk them
    return agent.run()


# the flags a server command may give its settings
SERVER_FLAGS = ("host", "port", "keda_port", "database_url", "workers", "remote_write_mapping")


def _settings(args: argparse.Namespace, **overrides: Any) -> ServerSettings:
    flags = {name: getattr(args, name, None) for name in SERVER_FLAGS}
    flags.update(overrides)
    return ServerSettings(**{k: v for k, v in flags.items() if v is not None})


def _settings_errors(exc: ValidationError) -> str:
    return "\n".join(f"  {'.'.join(str(p) for p in e['loc']) or 'settings'}: {e['msg']}" for e in exc.errors())


def run_db_upgrade(args: argparse.Namespace) -> int:
    from sqlalchemy.engine import make_url

    from migrations import runner

    settings = _settings(args)
    runner.upgrade(settings.database_url)
    # postgresql://fp:s3cret@db/fp is shown as postgresql://fp:***@db/fp: terminals and CI logs are kept
    print(f"database at head: {make_url(settings.database_url).render_as_string(hide_password=True)}")
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
        runner.upgrade(settings.database_url, quiet=True)
    engine = make_engine(settings.database_url)
    scope = None if args.node_scope is None else tuple(g.strip() for g in args.node_scope.split(",") if g.strip())
    try:
        info, clear = TokenStore(engine).create(
            role, now=time.time(), name=args.name, node_id=args.node, node_scope=scope
        )
    except ValueError as exc:
        print(f"fleetpilot: {exc}", file=sys.stderr)
        return 2
    engine.dispose()
    print(f"created {info.role.value} token {info.id} ({info.name}); it is shown only once:")
    print(clear)
    return 0


def run_server(args: argparse.Namespace) -> int:
    import uvicorn

    from collector.remote.mapping import MappingError
    from fleetpilot.server import (
        METRICS_FOLDER_VARIABLE,
        bootstrap_admin,
        build_services,
        keda_scaler,
        prepare_database,
        server_app,
    )

    settings = _settings(args)
    prepare_database(settings)
    try:
        services = build_services(settings)
    except MappingError as exc:
        print(f"fleetpilot: --remote-write-mapping {exc}", file=sys.stderr)
        return 2
    admin_token = bootstrap_admin(services, settings.admin_token)
    print(f"fleetpilot server on http://{settings.host}:{settings.port}/ (API docs at /docs)", flush=True)
    if admin_token is not None:
        print(f"First start: created an admin token; it is shown only once.\nAdmin token: {admin_token}", flush=True)
    # proxy_headers off: uvicorn would take X-Forwarded-For from any loopback peer as the client's address, which
    # let one caller pose as endless clients; web.client_address reads it from settings.trusted_proxies only.
    listen: dict[str, Any] = {
        "host": settings.host,
        "port": settings.port,
        "backlog": settings.accept_backlog,
        "timeout_keep_alive": settings.http_keep_alive_seconds,
        "log_level": "warning",
        "proxy_headers": False,
    }
    workers = settings.worker_processes
    if workers == 1:
        with keda_scaler(services, settings) as keda:
            uvicorn.run(server_app(services, settings, keda), **listen)
        return 0
    services.engine.dispose()
    # each worker is a fresh interpreter that builds its settings from FLEETPILOT_*: the flags go there too
    for name in ("host", "port", "database_url", "remote_write_mapping"):
        if getattr(settings, name) is not None:
            os.environ[f"FLEETPILOT_{name.upper()}"] = str(getattr(settings, name))
    os.environ["FLEETPILOT_WORKERS"] = str(workers)
    print(f"{workers} worker processes; each runs its share of ingest and takes a turn at the jobs", flush=True)
    with tempfile.TemporaryDirectory(prefix="fleetpilot-metrics-") as metrics_folder:
        os.environ[METRICS_FOLDER_VARIABLE] = metrics_folder  # the workers' metrics, summed on every scrape
        with keda_scaler(services, settings):  # here in the supervisor: one process on the port
            uvicorn.run("fleetpilot.server:worker_app", factory=True, workers=workers, **listen)
    return 0


def run_demo(args: argparse.Namespace) -> int:
    from demo.run import run_demo as demo
    from inference_agent.ports import free_port

    return demo(_settings(args, host="127.0.0.1", port=args.port or free_port()))


if __name__ == "__main__":
    sys.exit(main())

"""One replica: its own process running one engine of one pool, answering on a loopback port.

``python -m inference_agent.serving.replica --pool NAME --kind text|classify --port P [--served-model-name M]
[--seed S] [--device cpu|cuda] [--engine torch|fake] [--http-max-connections N] [--http-socket-timeout-s S]
[--http-head-timeout-s S] [--http-max-body-bytes N]``. It listens at once (``/healthz`` and ``/health`` answer 503
"warming"), builds and warms its engine, then answers them 200 ("ready"). Routes: ``POST /v1/completions`` and
``POST /v1/chat/completions`` (OpenAI shapes, SSE with ``"stream": true``), ``POST /v1/classify``, ``GET
/v1/models`` (its served model name, the pool's by default), ``GET /metrics`` (vLLM's metric names, so that it can
run as an engine profile read with ``metrics_kind = "vllm"``), ``GET /stats`` (EngineStats plus the replica's
request ledger), ``POST /drain`` (stop admitting; in-flight requests finish); all but health, metrics and models
need the key in ``FLEETPILOT_REPLICA_KEY`` (``key.py``), which the supervisor sets. SIGTERM drains, waits
for in-flight work up to ``--drain-timeout-s``, aborts what is left, and exits 0. torch is imported only here, and
only for ``--engine torch``.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import threading
import time
from collections.abc import Sequence
from typing import Any

from inference_agent.heap import settle_heap
from inference_agent.http_server import MAX_BODY_BYTES, ConnectionLimits, Server
from inference_agent.serving.replica.app import ReplicaApp, ReplicaState
from inference_agent.serving.replica.engine_factory import (
    EngineOptions,
    build_classifier,
    build_text_engine,
    pin_to_quota,
)
from inference_agent.serving.replica.handler import handler_for
from inference_agent.serving.replica.key import REPLICA_KEY_ENV
from inference_agent.stop_signals import stop_on_signals
from inference_agent.torch_runtime.api import ImageClassifier, TextEngine
from wire.builtin_engines import BUILTIN_ENGINES

log = logging.getLogger("inference_agent.serving.replica")


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m inference_agent.serving.replica", description=__doc__)
    parser.add_argument("--pool", required=True)
    parser.add_argument("--kind", required=True, choices=BUILTIN_ENGINES)
    parser.add_argument("--port", type=int, required=True, help="loopback port to answer on (0: any free port)")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--served-model-name", help="the model name it answers to in /v1/models and /metrics")
    parser.add_argument("--seed", type=int, default=0, help="seed of the engine's deterministic weights")
    parser.add_argument("--device", default="cpu", help="cpu, cuda or cuda:N")
    parser.add_argument("--engine", default="torch", choices=["torch", "fake"], help="fake: no torch, for tests")
    parser.add_argument("--token-delay-s", type=float, default=0.002, help="per-token delay of the fake engine")
    parser.add_argument("--ignore-eos", action="store_true", help="generate exactly max_tokens (benchmarks)")
    parser.add_argument("--drain-timeout-s", type=float, default=30.0, help="how long SIGTERM waits for in-flight work")
    parser.add_argument("--http-max-connections", type=int, default=256, help="connections served at once")
    parser.add_argument("--http-socket-timeout-s", type=float, default=30.0, help="a connection's idle timeout")
    parser.add_argument("--http-head-timeout-s", type=float, default=10.0, help="a request head's whole deadline")
    parser.add_argument("--http-max-body-bytes", type=int, default=MAX_BODY_BYTES, help="the largest request body")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=logging.INFO, format=f"%(asctime)s %(levelname)s replica {args.pool}: %(message)s")
    threads = pin_to_quota()
    key = os.environ.get(REPLICA_KEY_ENV) or None
    if key is None:
        log.warning("no %s: any process on this host may call this replica, as any tenant", REPLICA_KEY_ENV)
    app = ReplicaApp(args.pool, args.kind, model_name=args.served_model_name, key=key)
    # only the front end and the agent connect, all from 127.0.0.1: no per-peer bound below the total
    connections = args.http_max_connections
    limits = ConnectionLimits(
        connections,
        args.http_socket_timeout_s,
        args.http_head_timeout_s,
        connections,
        max_body_bytes=args.http_max_body_bytes,
    )
    server = Server(args.host, args.port, handler_for(app), name="replica-http", limits=limits)
    server.start()
    stop = threading.Event()

    def exit_while_warming() -> None:
        if app.state is ReplicaState.WARMING:
            os._exit(0)  # nothing admitted yet: no work to finish, and the warm-up does not look at ``stop``

    stop_on_signals(stop, first=exit_while_warming)
    threading.Thread(target=_watch_parent, args=(os.getppid(), stop), name="parent-watch", daemon=True).start()
    options = EngineOptions(
        args.kind, args.engine, args.seed, args.device, threads, args.token_delay_s, ignore_eos=args.ignore_eos
    )
    started = time.monotonic()
    engine: TextEngine | ImageClassifier
    if args.kind == "text":
        engine = text_engine = build_text_engine(options)
        text_engine.start()
        text_engine.warm_up()
        settle_heap()
        app.ready(text_engine=text_engine)
    else:
        engine = classifier = build_classifier(options)
        classifier.start()
        classifier.warm_up()
        settle_heap()
        app.ready(classifier=classifier)
    log.info(
        "ready on port %d after %.1f s (%s engine on %s)",
        server.port,
        time.monotonic() - started,
        args.engine,
        args.device,
    )
    stop.wait()
    return shut_down(app, engine, server, args.drain_timeout_s)


def _watch_parent(parent: int, stop: threading.Event) -> None:
    """An agent killed with SIGKILL cannot drain its replicas: each notices it is orphaned and drains itself."""
    while not stop.wait(1.0):
        if os.getppid() != parent:
            log.warning("the agent (pid %d) is gone: draining", parent)
            stop.set()


def shut_down(app: ReplicaApp, engine: TextEngine | ImageClassifier, server: Any, drain_timeout_s: float) -> int:
    """Drain: admit nothing new, let in-flight requests finish up to the deadline, abort the rest, stop."""
    app.drain()
    if not app.ledger.wait_idle(drain_timeout_s):
        aborted = app.abort_all()
        log.warning("drain deadline (%.0f s) passed: aborted %d requests", drain_timeout_s, aborted)
        app.ledger.wait_idle(5.0)
    engine.stop()
    server.close()
    log.info("stopped")
    return 0


if __name__ == "__main__":
    sys.exit(main())

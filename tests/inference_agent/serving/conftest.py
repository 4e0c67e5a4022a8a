"""In-process replicas (the real replica routes over the fake engines) for fast front-end tests."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from inference_agent.http_server import Server
from inference_agent.serving.replica.app import ReplicaApp
from inference_agent.serving.replica.fake_engine import FakeClassifier, FakeTextEngine
from inference_agent.serving.replica.handler import handler_for
from inference_agent.serving.routing import Endpoint

StartReplica = Callable[..., tuple[ReplicaApp, Endpoint]]


@pytest.fixture
def start_replica() -> Iterator[StartReplica]:
    servers: list[Server] = []
    engines: list[FakeTextEngine] = []

    def start(
        pool: str, kind: str = "text", *, token_delay_s: float = 0.001, name: str = "r"
    ) -> tuple[ReplicaApp, Endpoint]:
        app = ReplicaApp(pool, kind)
        server = Server("127.0.0.1", 0, handler_for(app), name=f"replica-{name}")
        server.start()
        servers.append(server)
        if kind == "text":
            engine = FakeTextEngine(token_delay_s=token_delay_s)
            engines.append(engine)
            app.ready(text_engine=engine)
        else:
            app.ready(classifier=FakeClassifier())
        return app, Endpoint(name, server.port)

    yield start
    for engine in engines:
        engine.stop()
    for server in servers:
        server.close()

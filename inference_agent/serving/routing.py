"""What the front end and the probes route by: each pool's kind and its warm replicas' endpoints (with the key that
opens each, ``replica/key.py``), as the supervisor publishes them."""

from __future__ import annotations

from dataclasses import dataclass, field

from inference_agent.serving.replica.key import bearer_headers


@dataclass(frozen=True)
class Endpoint:
    replica_id: str
    port: int
    host: str = "127.0.0.1"
    key: str = field(default="", repr=False)  # the replica's key (``replica/key.py``): only its callers know it

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def auth_headers(self) -> dict[str, str]:
        return bearer_headers(self.key)


@dataclass(frozen=True)
class PoolRoutes:
    """A pool as routing sees it: its kind, its warm replicas, how many are on their way, and the most consecutive
    crashes among its replicas (a crash loop; 0 once they run a minute)."""

    kind: str  # the API its replicas answer: text (completions, chat completions) or classify
    ready: tuple[Endpoint, ...] = ()
    starting: int = 0
    consecutive_crashes: int = 0
    served_model: str | None = None  # an engine profile's model: the front end puts it in the body's ``model``
    engine: str | None = None  # the engine profile its replicas run; None: the built-in engine
    metrics_kind: str | None = None  # how the profile's metrics read (probes.engines.EngineKind); None: not read
    metrics_path: str | None = None

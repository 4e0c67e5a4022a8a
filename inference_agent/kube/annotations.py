"""Which pods are engines to read: fleetpilot's annotations on a pod, turned into one engine source or a refusal.

A pod is read when it carries ``fleetpilot.io/pool``, ``fleetpilot.io/engine`` and ``fleetpilot.io/metrics-port``
(``fleetpilot.io/metrics-path`` defaults to ``/metrics``), is Running and has a pod IP. A pod with none of the
annotations is not ours; one with some of them wrong is refused with the annotation named.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from inference_agent.serving.supervision.pools import POOL_NAME
from wire.scrape.engines import EngineKind

PREFIX = "fleetpilot.io/"
POOL = PREFIX + "pool"
ENGINE = PREFIX + "engine"
METRICS_PORT = PREFIX + "metrics-port"
METRICS_PATH = PREFIX + "metrics-path"
DEFAULT_METRICS_PATH = "/metrics"
MAX_PATH_CHARS = 256


@dataclass(frozen=True)
class PodEngine:
    """An engine a pod runs, read as pool ``pool`` at ``url`` (an ``--engine POOL=KIND=URL`` found, not given)."""

    pod: str  # "namespace/name"
    pool: str
    kind: EngineKind
    url: str
    created: str = ""  # metadata.creationTimestamp (RFC 3339, UTC: they sort as text); of two pods, the older is read


class BadAnnotation(ValueError):
    """A pod's fleetpilot annotation cannot be used; the message names the pod and the annotation."""


def pod_key(pod: dict[str, Any]) -> str:
    """``namespace/name`` of a Pod object."""
    meta = pod.get("metadata") or {}
    return f"{meta.get('namespace', '')}/{meta.get('name', '')}"


def claims_a_pool(pod: dict[str, Any]) -> bool:
    """Whether ``pod`` carries any of fleetpilot's annotations (is ours to read or to refuse)."""
    annotations: dict[str, str] = (pod.get("metadata") or {}).get("annotations") or {}
    return any(name.startswith(PREFIX) for name in annotations)


def engine_of(pod: dict[str, Any]) -> PodEngine | None:
    """The engine ``pod`` runs; None for a pod without fleetpilot's annotations or not (yet) Running with an IP.

    Raises BadAnnotation for a pod that is ours but wrongly annotated: ``fleetpilot.io/engine: vlm`` or
    ``fleetpilot.io/metrics-port: http``.
    """
    if not claims_a_pool(pod):
        return None
    meta = pod.get("metadata") or {}
    annotations: dict[str, str] = meta.get("annotations") or {}
    key = pod_key(pod)
    pool, kind, port = (_required(annotations, key, name) for name in (POOL, ENGINE, METRICS_PORT))
    if not POOL_NAME.match(pool):
        raise BadAnnotation(f"pod {key}: {POOL} {pool!r} is not a pool name")
    if kind not in EngineKind.__members__.values():
        raise BadAnnotation(f"pod {key}: {ENGINE} {kind!r} is not one of {', '.join(EngineKind)}")
    if not (port.isdigit() and 1 <= int(port) <= 65535):
        raise BadAnnotation(f"pod {key}: {METRICS_PORT} {port!r} is not a port number (1-65535)")
    path = annotations.get(METRICS_PATH, DEFAULT_METRICS_PATH)
    if not path.startswith("/") or len(path) > MAX_PATH_CHARS or any(c.isspace() for c in path):
        raise BadAnnotation(
            f"pod {key}: {METRICS_PATH} {path[:80]!r} is not a URL path "
            f"(/…, no spaces, {MAX_PATH_CHARS} characters at most)"
        )
    status = pod.get("status") or {}
    ip = status.get("podIP")
    if status.get("phase") != "Running" or not ip:
        return None
    host = f"[{ip}]" if ":" in ip else ip
    url = f"http://{host}:{int(port)}{path}"
    return PodEngine(key, pool, EngineKind(kind), url, str(meta.get("creationTimestamp") or ""))


def _required(annotations: dict[str, str], key: str, name: str) -> str:
    value = annotations.get(name)
    if not value:
        raise BadAnnotation(f"pod {key}: {name} is missing (a pod read by fleetpilot names its pool, engine and port)")
    return value

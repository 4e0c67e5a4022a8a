"""Typed settings of the agent deployable: flags, then ``FLEETPILOT_*`` variables, then defaults."""

from __future__ import annotations

import socket
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from inference_agent.http_server import ConnectionLimits
from inference_agent.kube.pod_scope import parse_label_selector
from inference_agent.serving.supervision.pools import POOL_NAME, PoolSpec, parse_pools
from wire.scrape.engines import EngineKind

ENGINE_KINDS = tuple(kind.value for kind in EngineKind)


@dataclass(frozen=True)
class WorkloadSpec:
    """``none``, ``builtin`` (this agent runs the torch replicas of its pools), or an external engine to read
    (``vllm=http://127.0.0.1:8000/metrics``)."""

    kind: str
    url: str | None = None

    @classmethod
    def parse(cls, text: str) -> WorkloadSpec:
        if text in ("none", "builtin"):
            return cls(text)
        kind, sep, url = text.partition("=")
        if kind in ENGINE_KINDS and sep and url.startswith(("http://", "https://")):
            return cls(kind, url)
        raise ValueError(
            f"workload {text!r}: use none, builtin, or KIND=URL with KIND {_kinds()} (URL of its /metrics)"
        )


@dataclass(frozen=True)
class EngineEndpoint:
    """An engine the node runs outside fleetpilot, read as pool ``pool``: ``--engine chat=vllm=http://…/metrics``."""

    pool: str
    kind: str
    url: str

    @classmethod
    def parse(cls, text: str) -> EngineEndpoint:
        pool, _, rest = text.partition("=")
        kind, sep, url = rest.partition("=")
        if POOL_NAME.match(pool) and kind in ENGINE_KINDS and sep and url.startswith(("http://", "https://")):
            return cls(pool, kind, url)
        raise ValueError(
            f"engine {text!r}: use POOL=KIND=URL with KIND {_kinds()}, e.g. chat=vllm=http://127.0.0.1:8000/metrics"
        )


def _kinds() -> str:
    return ", ".join(ENGINE_KINDS)


class AgentSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="FLEETPILOT_", extra="ignore")

    collector: str = Field(description="base URL of the collector, e.g. http://fleetpilot:8080")
    # the agent token: FLEETPILOT_TOKEN, or a file holding it (FLEETPILOT_TOKEN_FILE, --token-file), never a flag
    # (`ps` shows flags); the file is read here once and again whenever it changes (inference_agent.agent_token)
    token: str = Field(min_length=8)
    token_file: Path | None = None
    node_id: str = Field(default_factory=socket.gethostname, pattern=r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$")
    workload: str = "none"
    # engines read, not run (--engine POOL=KIND=URL, repeatable), and the node's config file (--config: labels,
    # engine profiles it may run, engines it reads; inference_agent.config)
    engines: list[str] = Field(default_factory=list)
    config: Path | None = None
    pool: str | None = Field(None, pattern=r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$")
    gpu_probe: str = "auto"
    spool_dir: Path = Path("./.fleetpilot/agent-spool")
    spool_max_seconds: float = Field(3600.0, gt=0)
    # spool/rejected/ (batches the collector refused as invalid, kept for an operator to read): at most this many
    # bytes and files, the oldest dropped first (fleetpilot_agent_rejected_batches_dropped_total counts them)
    spool_rejected_max_bytes: int = Field(64 * 1024 * 1024, ge=4096)
    spool_rejected_max_files: int = Field(1000, ge=1)
    sample_interval_seconds: float = Field(0.5, gt=0)
    push_interval_seconds: float = Field(1.0, gt=0)
    push_max_samples: int = Field(2000, ge=1)
    # a collector's Retry-After is believed up to this many seconds (a longer or unparsable one counts as this)
    push_max_retry_after_seconds: float = Field(60.0, gt=0)
    engine_scrape_interval_seconds: float = Field(1.0, gt=0)
    metrics_host: str = "127.0.0.1"
    metrics_port: int = Field(9401, ge=0, le=65535)
    shutdown_flush_seconds: float = Field(5.0, ge=0)
    # the built-in workload (--workload builtin): its pools until the control plane says, and its serving API
    pools: str = "text-small=text:1"
    serve_host: str = "127.0.0.1"
    serve_port: int = Field(8100, ge=0, le=65535)
    replica_engine: Literal["torch", "fake"] = "torch"
    replica_device: str = Field("auto", pattern=r"^(auto|cpu|cuda(:[0-9]+)?)$")
    replica_drain_seconds: float = Field(20.0, ge=0)
    replica_startup_timeout_seconds: float = Field(300.0, gt=0)
    replica_max_in_flight: int = Field(32, ge=1)
    serve_queue_limit: int = Field(256, ge=0)
    serve_queue_timeout_seconds: float = Field(30.0, gt=0)
    # the serving API's largest request body (16 MiB: 64 classify images of 3×64×64 floats as JSON are 15.7 MB; a
    # text request's body is held to 1 MiB, 16× its 64 KiB prompt), and the bodies it reads and decodes at once, all
    # together (64 MiB: four of the largest; past it a request is answered 503 unread)
    serve_max_body_bytes: int = Field(16 * 1024 * 1024, ge=64 * 1024, le=256 * 1024 * 1024)
    serve_max_body_bytes_in_flight: int = Field(64 * 1024 * 1024, ge=64 * 1024)
    # replicas this node runs at most, whatever a desired state asks (the rest is refused and logged)
    max_replicas: int = Field(64, ge=1, le=4096)
    # the agent's HTTP servers: connections served at once (past it, refused), from one address at most (the serving
    # port's trusted gateways excepted), a socket's idle timeout, and how long a request's whole head may take to
    # arrive (a byte every 20 s is cut after this, not after 30 s a byte)
    http_max_connections: int = Field(256, ge=1)
    http_max_connections_per_peer: int = Field(192, ge=1)
    http_socket_timeout_seconds: float = Field(30.0, gt=0)
    http_head_timeout_seconds: float = Field(10.0, gt=0)
    # Tenants present `Authorization: Bearer <tenant key>`, checked against the key hashes in the desired state.
    # Behind a trusted gateway the agent may instead believe this header (e.g. X-Tenant) from these addresses or
    # CIDRs only (a JSON list); both unset by default.
    serve_tenant_header: str | None = None
    serve_trusted_gateways: list[str] = Field(default_factory=list)
    # where a pool's cpu_share (in the desired pool_limits) caps its replicas: a cgroup v2 directory delegated to the
    # agent, else (hosts whose cpu controller is cgroup v1) a directory of the v1 cpu hierarchy, created on first use
    replica_cgroup_root: Path | None = None
    replica_cgroup_v1_root: Path | None = Path("/sys/fs/cgroup/cpu/fleetpilot")
    # in a DaemonSet pod: read the engines of this node's pods (--node-id names the node; fleetpilot.io/ annotations,
    # inference_agent.kube) and attribute GPUs to the pods holding them through the kubelet's pod-resources socket
    kubernetes_pods: bool = False
    pod_resources_socket: Path = Path("/var/lib/kubelet/pod-resources/kubelet.sock")
    # which pods are believed (inference_agent.kube.pod_scope): those in these namespaces (a JSON list; empty: the
    # agent's own, from its service account), whose labels match this selector (KEY=VALUE,...; unset: any), and not
    # on the host's network unless allowed (a hostNetwork pod's metrics-port is a port of the node itself)
    kubernetes_pod_namespaces: list[str] = Field(default_factory=list)
    kubernetes_pod_selector: str | None = None
    kubernetes_pods_host_network: bool = False

    @model_validator(mode="after")
    def _bodies_fit(self) -> AgentSettings:
        if self.serve_max_body_bytes_in_flight < self.serve_max_body_bytes:
            raise ValueError(
                f"serve_max_body_bytes_in_flight ({self.serve_max_body_bytes_in_flight}) is less than one body of "
                f"serve_max_body_bytes ({self.serve_max_body_bytes}): the largest request could never be read"
            )
        return self

    @model_validator(mode="before")
    @classmethod
    def _token_from_file(cls, data: Any) -> Any:
        """``token_file`` fills ``token`` (one trailing newline dropped, as `echo` and Secrets leave it); naming both
        is ambiguous and refused."""
        if not isinstance(data, dict) or data.get("token_file") in (None, ""):
            return data
        if data.get("token"):
            raise ValueError("token and token_file: give one of them, not both")
        path = Path(data["token_file"])
        try:
            return {**data, "token": path.read_text().strip()}
        except OSError as exc:
            raise ValueError(f"token_file {str(path)!r}: cannot read it ({exc.strerror})") from None

    @field_validator("collector")
    @classmethod
    def _http_url(cls, value: str) -> str:
        if not value.startswith(("http://", "https://")):
            raise ValueError(f"{value!r} is not an http(s) URL")
        return value.rstrip("/")

    @field_validator("workload")
    @classmethod
    def _workload(cls, value: str) -> str:
        WorkloadSpec.parse(value)
        return value

    @field_validator("engines")
    @classmethod
    def _engines(cls, value: list[str]) -> list[str]:
        pools = [EngineEndpoint.parse(v).pool for v in value]
        twice = sorted({p for p in pools if pools.count(p) > 1})
        if twice:
            raise ValueError(f"engine: pool {', '.join(twice)} named twice; one endpoint per pool")
        return value

    @field_validator("pools")
    @classmethod
    def _pools(cls, value: str) -> str:
        parse_pools(value)
        return value

    @field_validator("kubernetes_pod_selector")
    @classmethod
    def _pod_selector(cls, value: str | None) -> str | None:
        if value is not None:
            parse_label_selector(value)
        return value

    @field_validator("gpu_probe")
    @classmethod
    def _gpu_probe(cls, value: str) -> str:
        if value in ("auto", "nvml", "none") or value.startswith("replay:"):
            return value
        raise ValueError(f"gpu_probe {value!r}: use auto, nvml, none or replay:PATH[:GPUS]")

    @property
    def workload_spec(self) -> WorkloadSpec:
        return WorkloadSpec.parse(self.workload)

    @property
    def engine_endpoints(self) -> list[EngineEndpoint]:
        return [EngineEndpoint.parse(v) for v in self.engines]

    @property
    def pool_specs(self) -> dict[str, PoolSpec]:
        return parse_pools(self.pools)

    @property
    def http_limits(self) -> ConnectionLimits:
        """What bounds each of the agent's HTTP servers (each replica's too, less the per-peer bound)."""
        return ConnectionLimits(
            self.http_max_connections,
            self.http_socket_timeout_seconds,
            self.http_head_timeout_seconds,
            self.http_max_connections_per_peer,
        )

"""Control state on the wire, both directions: what a node reports of itself (:class:`NodeReport`, in the ingest
body) and what the control plane wants of it (:class:`DesiredState`, in the ingest answer).

One pydantic module with no server dependency: the server validates and builds with it, the agent builds and reads
with it (``fleetpilot[agent]`` imports it). Both models ignore fields they do not know, so a newer agent talks to an
older server and a newer server to an older agent; a field they know with a bad value is an error naming the field
(``ValidationError``): the server refuses the batch with 422, the agent keeps its last good desired state.

Shapes (CONTRACT section 5, docs/operations.md "Agents across a release")::

    "report": {"ts": 1764424800.5,
               "pools": {"chat": {"ready": 2, "starting": 1, "draining": 0, "consecutive_crashes": 0,
                                  "startup_seconds": 41.2,
                                  "tenants": {"acme": {"requests_per_second": 3.5, "tokens_per_second": 420.0,
                                                       "latency_p99_seconds": 0.8, "kv_blocks": 96}}}},
               "capabilities": {"engines": {"text": {}, "classify": {"serves": "classify"},
                                            "vllm": {"models": ["meta-llama/Llama-3.1-8B-Instruct"]}},
                                "labels": {"zone": "eu-1", "gpu": "h100"}},
               "refused": {"reason": "UnknownEngine", "detail": "pools.chat.engine: 'sglang' is not declared"},
               "absent": {"gpu": "NVML Shared Library Not Found",
                          "pools": {"chat": {"kv_cache_utilization_ratio": "tgi exposes no KV-cache metric"}}}}

    "desired": {"pools": {"chat": {"replicas": 3},
                          "llama": {"replicas": 2, "engine": "vllm", "model": "meta-llama/Llama-3.1-8B-Instruct",
                                    "gpus": 1, "gpu_memory_mib": 40960}},
                "pool_limits": {"chat": {"cpu_share": 0.2, "active_thread_percentage": 20, "gpu_memory_mib": 8192}},
                "tenants": {"acme": {"slo_class": "latency_critical",
                                     "quotas": {"chat": {"rate_rps": 5.0, "burst": 5.0, "max_concurrency": 4,
                                                         "tokens_per_second": 800.0, "token_burst": 800.0,
                                                         "kv_share": 0.3}}}},
                "tenant_keys": {"<sha256 hex of a tenant key>": "acme"}}

``desired.pools`` absent (null) means the control plane does not decide this node's pools (the agent keeps its own
``--pools``); present, it is the node's whole pool set. ``tenants`` and ``pool_limits`` absent lift every limit.

A pool runs a built-in engine (``kind`` text or classify) unless it names an ``engine``: one of the engine profiles
the node declared in its ``--config`` and reports under ``capabilities.engines``, with a ``model`` from that
profile's list. The control plane names a profile and a model, never a command; a node asked for an engine or a
model it did not declare refuses the whole state and says why in its next report (``refused``).
"""

from __future__ import annotations

import hashlib
import secrets
from enum import StrEnum
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field

from wire.builtin_engines import BUILTIN_ENGINES
from wire.catalog import METRIC_NAMES

NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$"
Name = Annotated[str, Field(pattern=NAME_PATTERN)]
# Tenants one pool report may carry usage for: each is a row of the enforcer's state and of its observation every
# tick (1,000 nodes x 64 pools x 256 tenants is already 16 M figures), so a report naming more is refused.
MAX_TENANTS_PER_POOL = 256
# Pools one desired state or report may name; the server's own bound (ingest_max_pools_per_node) is lower.
MAX_POOLS = 256
SHA256_HEX = r"^[0-9a-f]{64}$"
MAX_KEYS_PER_TENANT = 16  # rotation needs 2; 16 leaves room for one per client without sizing anything by a caller
# Tenant key digests one desired state may carry: 6,250 tenants at MAX_KEYS_PER_TENANT each; ~9 MB.
MAX_TENANT_KEYS = 100_000

# What an engine profile may be asked to serve: a Hugging Face id or a path, no spaces or shell characters (the
# agent passes it as one argument, never through a shell, and only when its profile lists it).
MODEL_PATTERN = r"^[A-Za-z0-9_./][A-Za-z0-9._:/@+=-]{0,255}$"
ModelName = Annotated[str, Field(pattern=MODEL_PATTERN)]
# node labels, as Kubernetes spells them (an optional DNS prefix, a name, and a value that may be empty)
LABEL_KEY_PATTERN = r"^([a-z0-9]([a-z0-9.-]{0,251}[a-z0-9])?/)?[A-Za-z0-9]([A-Za-z0-9._-]{0,61}[A-Za-z0-9])?$"
LABEL_VALUE_PATTERN = r"^([A-Za-z0-9]([A-Za-z0-9._-]{0,61}[A-Za-z0-9])?)?$"
LabelKey = Annotated[str, Field(pattern=LABEL_KEY_PATTERN)]
LabelValue = Annotated[str, Field(pattern=LABEL_VALUE_PATTERN)]
MAX_ENGINES = 64  # engine profiles one node may declare
MAX_MODELS_PER_ENGINE = 256
MAX_LABELS = 64

Count = Annotated[int, Field(ge=0, strict=True)]
Figure = Annotated[float, Field(ge=0, allow_inf_nan=False)]
Seconds = Annotated[float, Field(ge=0, allow_inf_nan=False)]


class _Wire(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)


class SloClass(StrEnum):
    LATENCY_CRITICAL = "latency_critical"
    STANDARD = "standard"
    BATCH = "batch"

    @property
    def guaranteed(self) -> bool:
        """Latency-critical and standard tenants are promised their SM share; batch takes what is left."""
        return self is not SloClass.BATCH


# --- node → control plane ---------------------------------------------------------------------------------------


class TenantUsage(_Wire):
    """One tenant's use of one pool's replicas on the node over the agent's last sampling window."""

    requests_per_second: Figure | None = None
    tokens_per_second: Figure | None = None  # generated tokens; text pools only
    latency_p99_seconds: Seconds | None = None
    kv_blocks: Figure | None = None  # KV-cache blocks its sequences hold now; text pools only


class PoolReport(_Wire):
    """A pool's replicas on the node: ``ready`` serve, ``starting`` are on their way, ``draining`` finish what they
    have and take nothing new. ``current`` (docs/architecture.md, glossary) is ready + starting."""

    ready: Count
    starting: Count = 0
    draining: Count = 0
    consecutive_crashes: Count = 0  # of the pool's most crash-looping replica slot; 0 once one stays up
    startup_seconds: Seconds | None = None  # the last replica's measured start → ready; None until one was ready
    tenants: Annotated[dict[Name, TenantUsage], Field(max_length=MAX_TENANTS_PER_POOL)] = Field(default_factory=dict)

    @property
    def current(self) -> int:
        return self.ready + self.starting


Kind = Annotated[str, Field(pattern="^(" + "|".join(BUILTIN_ENGINES) + ")$")]  # a built-in engine


class EngineOffer(_Wire):
    """One engine a node can run: a built-in one (no models: it takes none) or a declared profile with the models it
    may serve, and the API its replicas answer (``text``: completions and chat completions; ``classify``)."""

    models: Annotated[list[ModelName], Field(max_length=MAX_MODELS_PER_ENGINE)] = Field(default_factory=list)
    serves: Kind = "text"

    def takes(self, model: str | None) -> bool:
        """Whether a pool of ``model`` may run on it: a listed model, or none for an engine that takes none."""
        return model in self.models if self.models else model is None


class NodeCapabilities(_Wire):
    """What the control plane may place on the node: its engines (by name) and its labels (node selectors match
    them). The GPUs are the node's inventory."""

    engines: Annotated[dict[Name, EngineOffer], Field(max_length=MAX_ENGINES + len(BUILTIN_ENGINES))] = Field(
        default_factory=dict
    )
    labels: Annotated[dict[LabelKey, LabelValue], Field(max_length=MAX_LABELS)] = Field(default_factory=dict)


class DesiredRefusal(_Wire):
    """The agent refused the latest desired state as a whole (and keeps its last good one): a reason code and what
    was wrong, reported until it takes a state again."""

    reason: Annotated[str, Field(pattern=r"^[A-Za-z]{1,64}$")]
    detail: Annotated[str, Field(max_length=2000)]


# Why a metric is absent, as the agent logs it ("NVML Shared Library Not Found", "tgi exposes no KV-cache metric"):
# shown on the fleet page beside the missing value; the agent cuts a longer reason to this.
MAX_ABSENCE_REASON_CHARS = 300
AbsenceReason = Annotated[str, Field(min_length=1, max_length=MAX_ABSENCE_REASON_CHARS)]
CatalogMetric = Annotated[str, Field(pattern="^(" + "|".join(METRIC_NAMES) + ")$")]


class MetricAbsences(_Wire):
    """Why the node's readings lack catalog metrics: ``gpu`` when no GPU probe runs (each GPU metric is absent on
    every GPU), and per pool the catalog metrics its engine's reading lacks with the reason."""

    gpu: AbsenceReason | None = None  # None: a GPU probe runs
    pools: Annotated[
        dict[Name, Annotated[dict[CatalogMetric, AbsenceReason], Field(max_length=len(METRIC_NAMES))]],
        Field(max_length=MAX_POOLS),
    ] = Field(default_factory=dict)


class NodeReport(_Wire):
    """What the node runs, as of ``ts`` (the agent's clock when it cut the batch), what it can run, and whether it
    refused the latest desired state."""

    ts: Annotated[float, Field(gt=0, allow_inf_nan=False)]
    pools: Annotated[dict[Name, PoolReport], Field(max_length=MAX_POOLS)] = Field(default_factory=dict)
    capabilities: NodeCapabilities | None = None  # None: an agent that declares nothing (older than engine offers)
    refused: DesiredRefusal | None = None
    absent: MetricAbsences | None = None  # None: an agent older than absence reasons

    @property
    def replicas(self) -> int:
        """Ready, starting and draining replicas of every pool: what the node holds in all."""
        return sum(p.ready + p.starting + p.draining for p in self.pools.values())


# --- control plane → node ---------------------------------------------------------------------------------------


class PoolDesired(_Wire):
    """A pool's replicas on the node and what they run: the built-in ``kind``, or a declared ``engine`` profile with
    its ``model``; ``gpus`` each replica gets (CUDA_VISIBLE_DEVICES) and the GPU memory it may use."""

    replicas: Count
    kind: Kind | None = None  # None: what the node runs it as now (text for a new pool); ignored with ``engine``
    engine: Name | None = None  # an engine profile of the node's --config; None: the built-in ``kind``
    model: ModelName | None = None
    gpus: Annotated[int, Field(ge=1, le=64, strict=True)] | None = None  # None: the agent's default (shared)
    gpu_memory_mib: Annotated[int, Field(ge=1, le=10**9, strict=True)] | None = None


class PoolLimits(_Wire):
    """Each replica's device limits: ``cpu_share`` of the node's cores (the agent multiplies by its own), the MPS
    thread percentage and pinned memory of a GPU replica. A field left out is not limited."""

    cpu_share: Annotated[float, Field(gt=0, le=1, allow_inf_nan=False)] | None = None
    active_thread_percentage: Annotated[int, Field(ge=1, le=100, strict=True)] | None = None
    gpu_memory_mib: Annotated[int, Field(ge=1, le=10**9, strict=True)] | None = None


Rate = Annotated[float, Field(gt=0, allow_inf_nan=False)]
Burst = Annotated[float, Field(ge=1, allow_inf_nan=False)]


class QuotaDesired(_Wire):
    """A tenant's admission limits on one of the node's pools; a field left out keeps the agent's default."""

    rate_rps: Rate | None = None
    burst: Burst | None = None
    max_concurrency: Annotated[int, Field(ge=1, strict=True)] | None = None
    tokens_per_second: Rate | None = None
    token_burst: Burst | None = None
    kv_share: Annotated[float, Field(gt=0, le=1, allow_inf_nan=False)] | None = None


class TenantDesired(_Wire):
    slo_class: SloClass = SloClass.STANDARD
    quotas: Annotated[dict[Name, QuotaDesired], Field(max_length=MAX_POOLS)] = Field(default_factory=dict)


TenantKeyDigest = Annotated[str, Field(pattern=SHA256_HEX)]


class DesiredState(_Wire):
    """What the control plane wants a node to run and enforce; the ingest answer's ``desired``."""

    pools: Annotated[dict[Name, PoolDesired], Field(max_length=MAX_POOLS)] | None = None
    pool_limits: Annotated[dict[Name, PoolLimits], Field(max_length=MAX_POOLS)] = Field(default_factory=dict)
    tenants: dict[Name, TenantDesired] = Field(default_factory=dict)
    tenant_keys: Annotated[dict[TenantKeyDigest, Name], Field(max_length=MAX_TENANT_KEYS)] = Field(default_factory=dict)

    @property
    def replicas(self) -> int:
        """The replicas ``pools`` asks for in all (0 when it names none)."""
        return sum(p.replicas for p in (self.pools or {}).values())

    def is_empty(self) -> bool:
        return self.pools is None and not self.pool_limits and not self.tenants and not self.tenant_keys


# --- tenant keys ------------------------------------------------------------------------------------------------
# A key is ``fp_tenant_<43 url-safe characters>``: 256 random bits, so a plain SHA-256 digest is a safe stored form
# (nothing to brute-force) and fast enough for the serving front end to take per request. The control plane keeps
# and sends only digests (``DesiredState.tenant_keys``); the clear key is shown once, when it is created.

TENANT_KEY_PREFIX = "fp_tenant_"
SHOWN_PREFIX_CHARS = len(TENANT_KEY_PREFIX) + 6  # what a listing shows to tell keys apart: "fp_tenant_Ab3xYz"


def new_tenant_key() -> str:
    return f"{TENANT_KEY_PREFIX}{secrets.token_urlsafe(32)}"


def key_digest(key: str) -> str:
    """The key's stored and sent form: its SHA-256, hex (a ``TenantKeyDigest``)."""
    return hashlib.sha256(key.encode()).hexdigest()

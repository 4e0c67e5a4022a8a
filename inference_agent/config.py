"""The node's own config file (``fleetpilot agent --config PATH``, TOML or YAML): what this node may run and read.

The control plane places pools by name; it never sends a command. What a replica of an engine runs is declared here,
on the node, by whoever runs the node::

    labels = { zone = "eu-1", gpu = "h100" }

    [profiles.vllm]
    command = ["vllm", "serve", "{model}", "--port", "{port}", "--gpu-memory-utilization", "{gpu_memory_fraction}",
               "--tensor-parallel-size", "{gpus}"]
    env = { VLLM_API_KEY = "{replica_key}" }  # only the agent's front end may call it (serving/replica/key.py)
    health_path = "/health"
    metrics_path = "/metrics"
    metrics_kind = "vllm"
    models = ["meta-llama/Llama-3.1-8B-Instruct", "Qwen/Qwen2.5-7B-Instruct"]
    startup_timeout_seconds = 900
    drain_grace_seconds = 30

    [[engines]]               # an engine this node runs outside fleetpilot, read only
    pool = "chat"
    kind = "sglang"
    url = "http://127.0.0.1:30000/metrics"

A desired state may name a declared profile and one of its models, nothing else (``refusal``); the placeholders a
command may hold are the fixed set of :data:`PLACEHOLDERS`, each filled with a value the agent computes or a model
from the list, and each argument goes to ``exec`` as one argument, never through a shell.
"""

from __future__ import annotations

import string
import sys
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from wire.builtin_engines import BUILTIN_ENGINES, BuiltinEngine
from wire.control import EngineOffer, LabelKey, LabelValue, ModelName, Name
from wire.scrape.engines import EngineKind

# What a profile's command and environment may hold, and what fills each when a replica starts.
PLACEHOLDERS = {
    "model": "the pool's model, one of the profile's models",
    "port": "a free loopback port the replica must listen on",
    "host": "the address it must listen on (127.0.0.1: only the agent's front end reaches it)",
    "gpu_memory_fraction": "the pool's GPU memory over the smallest assigned GPU's (else the profile's default)",
    "gpus": "how many GPUs the replica got (for --tensor-parallel-size)",
    "pool": "the pool's name",
    "replica_id": "the replica's id, e.g. chat-3",
    "python": "the agent's own Python interpreter",
    "replica_key": "the key the front end presents to the replica (env only: e.g. VLLM_API_KEY, LLAMA_API_KEY)",
}
SECRET_PLACEHOLDERS = frozenset({"replica_key"})  # never on a command line: `ps` shows it to every user of the host
UrlPath = Annotated[str, Field(pattern=r"^/[A-Za-z0-9._~/-]{0,255}$")]


class ConfigError(ValueError):
    """The config file cannot be used: the message names the file and the field."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class EngineProfile(_Strict):
    """One engine this node may run as replicas: the command, how to tell it is ready, where its metrics are, and how
    long it gets to start and to drain."""

    command: Annotated[list[Annotated[str, Field(min_length=1)]], Field(min_length=1, max_length=256)]
    env: dict[Annotated[str, Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")], str] = Field(default_factory=dict)
    health_path: UrlPath = "/health"
    metrics_path: UrlPath | None = "/metrics"
    metrics_kind: EngineKind | None = None  # None: its replicas' metrics are not read (GPU and host ones still are)
    serves: BuiltinEngine = BuiltinEngine.TEXT
    models: Annotated[list[ModelName], Field(max_length=256)] = Field(default_factory=list)
    startup_timeout_seconds: Annotated[float, Field(gt=0, le=86400)] = 600.0
    drain_grace_seconds: Annotated[float, Field(ge=0, le=3600)] = 30.0
    gpu_memory_fraction: Annotated[float, Field(gt=0, le=1)] = 0.9

    @model_validator(mode="after")
    def _placeholders(self) -> EngineProfile:
        used: set[str] = set()
        for where, text in [("command", a) for a in self.command] + [(f"env.{k}", v) for k, v in self.env.items()]:
            found = _placeholders_in(where, text)
            if where == "command" and found & SECRET_PLACEHOLDERS:
                raise ValueError(f"command: {text!r}: put {{replica_key}} in the profile's environment, not its argv")
            used |= found
        if self.models and "model" not in used:
            raise ValueError("lists models but its command never says {model}: which model would it serve?")
        if not self.models and "model" in used:
            raise ValueError("its command says {model} but it lists no models: name the models it may serve")
        if "port" not in used:
            raise ValueError("its command never says {port}: the agent picks each replica's port")
        return self

    def offer(self) -> EngineOffer:
        return EngineOffer(models=list(self.models), serves=self.serves)

    @property
    def takes_replica_key(self) -> bool:
        """Whether its environment passes the replica's key to the engine; if not, any process on the host may call
        its replicas as any tenant."""
        return any("replica_key" in _placeholders_in(f"env.{k}", v) for k, v in self.env.items())

    def render(self, values: LaunchValues) -> tuple[list[str], dict[str, str]]:
        """The argv and the extra environment of one replica: every placeholder filled from ``values``."""
        fill = values.as_dict()
        return [_fill(a, fill) for a in self.command], {k: _fill(v, fill) for k, v in self.env.items()}


@dataclass(frozen=True)
class LaunchValues:
    """What fills a profile's placeholders for one replica."""

    model: str | None
    port: int
    pool: str
    replica_id: str
    gpus: int
    gpu_memory_fraction: float
    host: str = "127.0.0.1"
    replica_key: str = field(default="", repr=False)

    def as_dict(self) -> dict[str, str]:
        return {
            "model": self.model or "",
            "port": str(self.port),
            "host": self.host,
            "gpu_memory_fraction": f"{self.gpu_memory_fraction:.4g}",
            "gpus": str(self.gpus),
            "pool": self.pool,
            "replica_id": self.replica_id,
            "python": sys.executable,
            "replica_key": self.replica_key,
        }


class ExternalEngine(_Strict):
    """An engine this node runs outside fleetpilot, read through its Prometheus endpoint as pool ``pool``."""

    pool: Name
    kind: EngineKind
    url: Annotated[str, Field(pattern=r"^https?://\S+$")]


class AgentConfig(_Strict):
    labels: Annotated[dict[LabelKey, LabelValue], Field(max_length=64)] = Field(default_factory=dict)
    profiles: Annotated[dict[Name, EngineProfile], Field(max_length=64)] = Field(default_factory=dict)
    engines: list[ExternalEngine] = Field(default_factory=list)

    @field_validator("profiles")
    @classmethod
    def _not_builtin(cls, profiles: dict[str, EngineProfile]) -> dict[str, EngineProfile]:
        taken = sorted(set(profiles) & set(BUILTIN_ENGINES))
        if taken:
            raise ValueError(f"{', '.join(taken)}: the built-in engines' names; call the profile something else")
        return profiles

    @model_validator(mode="after")
    def _one_reader_per_pool(self) -> AgentConfig:
        pools = [e.pool for e in self.engines]
        twice = sorted({p for p in pools if pools.count(p) > 1})
        if twice:
            raise ValueError(f"engines: pool {', '.join(twice)} named twice; one endpoint per pool")
        return self

    def offers(self) -> dict[str, EngineOffer]:
        return {name: profile.offer() for name, profile in sorted(self.profiles.items())}

    @classmethod
    def load(cls, path: Path) -> AgentConfig:
        """Read and check ``path`` (``.toml``, ``.yaml`` or ``.yml``); ConfigError naming the file and the field."""
        try:
            raw = path.read_text()
        except OSError as exc:
            raise ConfigError(f"{path}: cannot read it ({exc.strerror})") from None
        data = _parse(path, raw)
        try:
            return cls.model_validate(data)
        except ValidationError as exc:
            problems = "; ".join(
                f"{'.'.join(map(str, e['loc'])) or 'top level'}: {e['msg'].removeprefix('Value error, ')}"
                for e in exc.errors()
            )
            raise ConfigError(f"{path}: {problems}") from None


def _parse(path: Path, raw: str) -> Mapping[str, Any]:
    suffix = path.suffix.lower()
    if suffix == ".toml":
        try:
            return tomllib.loads(raw)
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"{path}: not TOML ({exc})") from None
    if suffix in (".yaml", ".yml"):
        try:
            import yaml
        except ImportError:
            raise ConfigError(f"{path}: YAML needs PyYAML (pip install 'fleetpilot[agent]'), or use TOML") from None
        try:
            data = yaml.safe_load(raw)
        except yaml.YAMLError as exc:
            raise ConfigError(f"{path}: not YAML ({exc})") from None
        if data is None:
            return {}
        if not isinstance(data, dict):
            raise ConfigError(f"{path}: the top level must be a mapping (labels, profiles, engines)")
        return data
    raise ConfigError(f"{path}: name it .toml, .yaml or .yml")


def _placeholders_in(where: str, text: str) -> set[str]:
    """The placeholders ``text`` holds; only bare known names (no attribute, index, conversion or format spec)."""
    found: set[str] = set()
    try:
        parts = list(string.Formatter().parse(text))
    except ValueError as exc:
        raise ValueError(f"{where}: {text!r}: {exc} (write a literal brace as {{{{ or }}}})") from None
    for _, name, spec, conversion in parts:
        if name is None:
            continue
        if name not in PLACEHOLDERS or spec or conversion:
            known = ", ".join("{" + p + "}" for p in PLACEHOLDERS)
            raise ValueError(f"{where}: {text!r}: unknown placeholder {{{name}}}; known: {known}")
        found.add(name)
    return found


def _fill(text: str, values: Mapping[str, str]) -> str:
    return "".join(
        literal + (values[name] if name is not None else "") for literal, name, _, _ in string.Formatter().parse(text)
    )

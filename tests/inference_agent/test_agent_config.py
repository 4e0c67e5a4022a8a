"""The node's config file: what it may declare, what it refuses with the file and the field named, and how a profile's
command is filled for one replica (never through a shell, only with the fixed placeholders)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from inference_agent.config import AgentConfig, ConfigError, LaunchValues
from wire.control import EngineOffer

VLLM_NODE = """
labels = { zone = "eu-1", "topology.kubernetes.io/zone" = "eu-1a" }

[profiles.vllm]
command = ["vllm", "serve", "{model}", "--port", "{port}", "--gpu-memory-utilization", "{gpu_memory_fraction}",
           "--tensor-parallel-size", "{gpus}"]
metrics_kind = "vllm"
models = ["meta-llama/Llama-3.1-8B-Instruct", "Qwen/Qwen2.5-7B-Instruct"]
startup_timeout_seconds = 900

[[engines]]
pool = "legacy"
kind = "sglang"
url = "http://127.0.0.1:30000/metrics"
"""

SGLANG_NODE_YAML = """
labels: {gpu: h100}
profiles:
  sglang:
    command: [python, -m, sglang.launch_server, --model-path, "{model}", --port, "{port}",
              --mem-fraction-static, "{gpu_memory_fraction}", --tp, "{gpus}"]
    health_path: /health
    metrics_kind: sglang
    models: [Qwen/Qwen2.5-7B-Instruct]
"""


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_a_vllm_node_declares_its_profile_models_labels_and_a_read_only_engine(tmp_path: Path) -> None:
    config = AgentConfig.load(write(tmp_path, "node.toml", VLLM_NODE))
    assert config.labels == {"zone": "eu-1", "topology.kubernetes.io/zone": "eu-1a"}
    assert config.offers() == {
        "vllm": EngineOffer(models=["meta-llama/Llama-3.1-8B-Instruct", "Qwen/Qwen2.5-7B-Instruct"], serves="text")
    }
    assert [(e.pool, e.kind.value, e.url) for e in config.engines] == [
        ("legacy", "sglang", "http://127.0.0.1:30000/metrics")
    ]
    profile = config.profiles["vllm"]
    assert (profile.health_path, profile.metrics_path, profile.startup_timeout_seconds) == ("/health", "/metrics", 900)


def test_yaml_reads_like_toml(tmp_path: Path) -> None:
    config = AgentConfig.load(write(tmp_path, "node.yaml", SGLANG_NODE_YAML))
    assert config.profiles["sglang"].metrics_kind is not None
    assert config.offers()["sglang"].models == ["Qwen/Qwen2.5-7B-Instruct"]


def test_a_replica_command_is_filled_argument_by_argument(tmp_path: Path) -> None:
    profile = AgentConfig.load(write(tmp_path, "node.toml", VLLM_NODE)).profiles["vllm"]
    values = LaunchValues("Qwen/Qwen2.5-7B-Instruct", 8123, "chat", "chat-4", gpus=2, gpu_memory_fraction=0.5021)
    argv, env = profile.render(values)
    assert argv == [
        "vllm",
        "serve",
        "Qwen/Qwen2.5-7B-Instruct",
        "--port",
        "8123",
        "--gpu-memory-utilization",
        "0.5021",
        "--tensor-parallel-size",
        "2",
    ]
    assert env == {}


def test_python_and_env_placeholders(tmp_path: Path) -> None:
    text = """
[profiles.tiny]
command = ["{python}", "-m", "some.server", "--listen", "{host}:{port}"]
env = { REPLICA = "{replica_id}", POOL = "{pool}" }
"""
    profile = AgentConfig.load(write(tmp_path, "node.toml", text)).profiles["tiny"]
    argv, env = profile.render(LaunchValues(None, 9000, "p", "p-1", gpus=1, gpu_memory_fraction=0.9))
    assert argv == [sys.executable, "-m", "some.server", "--listen", "127.0.0.1:9000"]
    assert env == {"REPLICA": "p-1", "POOL": "p"}


@pytest.mark.parametrize(
    ("text", "named"),
    [
        ('[profiles.x]\ncommand = ["run", "{port}", "{cmd}"]', r"profiles\.x.*unknown placeholder \{cmd\}"),
        ('[profiles.x]\ncommand = ["run", "{port.__class__}"]', r"unknown placeholder \{port\.__class__\}"),
        ('[profiles.x]\ncommand = ["run", "{port!r}"]', r"unknown placeholder \{port\}"),
        ('[profiles.x]\ncommand = ["run", "{model}", "{port}"]', "lists no models"),
        ('[profiles.x]\ncommand = ["run", "{port}"]\nmodels = ["m"]', "never says {model}"),
        ('[profiles.x]\ncommand = ["run"]', "never says {port}"),
        ('[profiles.text]\ncommand = ["run", "{port}"]', "built-in engines' names"),
        ('[profiles.x]\ncommand = ["run", "{port}"]\nmetrics_kind = "ollama"', r"profiles\.x\.metrics_kind"),
        ('[profiles.x]\ncommand = ["run", "{port}"]\nshell = true', r"profiles\.x\.shell.*not permitted"),
        ('[profiles.x]\ncommand = ["run", "{port}"]\nmodels = ["a; rm -rf /"]', r"profiles\.x\.models\.0"),
        ('labels = { "bad key!" = "v" }', "labels"),
        (
            '[[engines]]\npool = "a"\nkind = "vllm"\nurl = "http://x"\n[[engines]]\npool = "a"\nkind = "tgi"\n'
            'url = "http://y"',
            "pool a named twice",
        ),
        ("profiles = [", "not TOML"),
    ],
)
def test_a_bad_config_names_the_file_and_the_field(tmp_path: Path, text: str, named: str) -> None:
    path = write(tmp_path, "node.toml", text)
    with pytest.raises(ConfigError, match=named) as refused:
        AgentConfig.load(path)
    assert str(path) in str(refused.value)


def test_a_config_with_another_suffix_or_missing_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"\.toml, \.yaml or \.yml"):
        AgentConfig.load(write(tmp_path, "node.ini", ""))
    with pytest.raises(ConfigError, match="cannot read it"):
        AgentConfig.load(tmp_path / "absent.toml")

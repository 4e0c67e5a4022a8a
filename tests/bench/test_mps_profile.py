"""``bench.mps``'s profile part rehearsed without a GPU: the same server, tenants, agent config and placed pools as on
the GPU, with the profile's replicas running the in-repo fake engine, one replayed H100 and the in-repo stand-in for
``nvidia-cuda-mps-control``. What only a GPU shows (the share's effect on tokens/s) is the device's
(scripts/gpu-check.sh); what this shows is that the profiles are declared, placed, started with their MPS shares,
read through the vLLM adapter, and deleted so that the next share gets the GPU."""

from __future__ import annotations

import os
import tomllib
from collections.abc import Iterator
from pathlib import Path

import pytest

from bench.lib.mps_daemon import PrivateMpsDaemon, private_mps_daemon
from bench.lib.mps_profile import GPU_SETUP, MODEL, ProfileSetup, profile_part
from inference_agent.config import AgentConfig
from inference_agent.serving.supervision.quota import MPS_THREADS_ENV

ROOT = Path(__file__).resolve().parents[2]
FAKE_MPS = ROOT / "scripts" / "fake-nvidia-cuda-mps-control"
ONE_H100 = f"replay:{ROOT / 'inference_agent' / 'probes' / 'fixtures' / 'nvml_h100_recording.jsonl'}:1"
REHEARSAL = ProfileSetup(replica_engine="fake", gpu_probe=ONE_H100)


def test_the_agent_config_declares_the_builtin_engine_on_cuda_as_a_vllm_profile_per_share(tmp_path: Path) -> None:
    path = tmp_path / "agent.toml"
    path.write_text(GPU_SETUP.config_toml())
    profiles = AgentConfig.load(path).profiles
    assert {name: p.env for name, p in profiles.items()} == {
        "builtin-cuda-25": {MPS_THREADS_ENV: "25"},
        "builtin-cuda-75": {MPS_THREADS_ENV: "75"},
    }
    for profile in profiles.values():
        assert profile.metrics_kind == "vllm" and profile.models == [MODEL]
        command = profile.command
        assert command[:3] == ["{python}", "-m", "inference_agent.serving.replica"]
        assert command[command.index("--device") + 1] == "cuda" and command[command.index("--engine") + 1] == "torch"
        assert "--ignore-eos" in command  # fixed generation lengths: tokens/s compare like for like
    rehearsed = tomllib.loads(REHEARSAL.config_toml())["profiles"]["builtin-cuda-25"]["command"]
    assert rehearsed[command.index("--engine") + 1] == "fake"


@pytest.fixture
def daemon(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[PrivateMpsDaemon]:
    """The stand-in daemon, and the same binary on the agent's PATH for its MpsControl."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "nvidia-cuda-mps-control").symlink_to(FAKE_MPS)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_MPS_LOG", str(tmp_path / "mps-commands.log"))
    with private_mps_daemon() as started:
        yield started


@pytest.mark.slow
def test_each_share_runs_on_a_placed_profile_replica_read_through_the_adapter(
    daemon: PrivateMpsDaemon, tmp_path: Path
) -> None:
    answer = profile_part(daemon, tmp_path / "fleet", quick=True, setup=REHEARSAL)
    figures = answer["engine_profile"]
    small, large = figures["shares"]["small"], figures["shares"]["large"]
    assert (small["engine"], large["engine"]) == ("builtin-cuda-25", "builtin-cuda-75")
    # each replica process started with its profile's share: what MPS reads when the client opens its context
    assert small["replica_started_with"] == {MPS_THREADS_ENV: "25"}, small
    assert large["replica_started_with"] == {MPS_THREADS_ENV: "75"}, large
    # what the clients counted and what the agent read through the adapter and pushed
    assert small["tokens_per_second"] > 0 and large["tokens_per_second"] > 0, figures
    assert figures["read_through_adapter"] is True, figures
    assert small["adapter_tokens_per_second"] > 0 and large["adapter_tokens_per_second"] > 0
    assert {"ratio", "adapter_ratio"} <= set(figures)
    # the first pool's replica left the GPU for the second
    assert small["replica_gone_after_delete"] is True and large["replica_gone_after_delete"] is True
    log = (tmp_path / "fleet" / "agent.log").read_text()
    assert "-m inference_agent.serving.replica --pool small --kind text" in log and "--engine fake" in log
    # the fake engine is no GPU: the ratio is not held here, and the part says so rather than passing
    assert answer["held"] is (0.8 * 3 <= figures["ratio"] <= 1.2 * 3)

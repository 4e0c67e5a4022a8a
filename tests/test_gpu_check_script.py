"""scripts/gpu-check.sh on a machine without a GPU (and with an interpreter whose torch does not import): every GPU
step is skipped with its reason, and it exits 0."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parent.parent
STEPS = ["nvml", "agent-e2e", "mps", "engine-profile", "isolation", "mps-fleet", "pytest-gpu", "workload"]

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(torch.cuda.is_available(), reason="on a GPU the script runs its checks (the device tool)"),
]


def test_without_a_gpu_every_step_is_skipped_with_its_reason_and_the_script_exits_0(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHON": sys.executable, "OUT": str(tmp_path), "PIP_NO_INDEX": "1"}
    done = subprocess.run(
        ["bash", str(ROOT / "scripts" / "gpu-check.sh")],
        check=False,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert done.returncode == 0, done.stdout[-3000:]
    steps = json.loads((tmp_path / "summary.json").read_text())["steps"]
    assert [s["step"] for s in steps] == STEPS
    for s in steps:
        assert s["status"].startswith("skipped: ") and len(s["status"]) > len("skipped: ") + 5, s
    assert "NVML" in steps[0]["status"] or "GPU" in steps[0]["status"], steps[0]
    # what comes back from the device: at most 8 plain files, no step's scratch file left behind
    files = sorted(p.name for p in tmp_path.iterdir())
    assert {"gpu-check.log", "summary.json", "nvidia-smi.txt"} <= set(files) and len(files) <= 8, files
    assert "0 ran, 8 skipped, 0 failed" in (tmp_path / "gpu-check.log").read_text()


def test_an_interpreter_whose_torch_does_not_import_skips_the_torch_steps_saying_so(tmp_path: Path) -> None:
    """As in an image without torch (the emulated CPython 3.12 one): the NVML steps still run their own checks, the
    steps whose benches need torch are skipped with torch's own error, and the script exits 0."""
    hidden = tmp_path / "hide" / "torch"
    hidden.mkdir(parents=True)
    (hidden / "__init__.py").write_text('raise ImportError("torch hidden by the test")\n')
    python = tmp_path / "python"
    python.write_text(f'#!/bin/sh\nPYTHONPATH="{hidden.parent}:$PYTHONPATH" exec {sys.executable} "$@"\n')
    python.chmod(0o755)
    out = tmp_path / "out"
    env = {**os.environ, "PYTHON": str(python), "OUT": str(out), "PIP_NO_INDEX": "1"}
    done = subprocess.run(
        ["bash", str(ROOT / "scripts" / "gpu-check.sh")], check=False, env=env, capture_output=True, text=True,
        timeout=240,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:]
    status = {s["step"]: s["status"] for s in json.loads((out / "summary.json").read_text())["steps"]}
    assert list(status) == STEPS
    needs_torch = {"mps", "engine-profile", "isolation", "mps-fleet", "pytest-gpu", "workload"}
    for step in needs_torch:
        assert status[step] == f"skipped: torch does not import with {python} (ImportError: torch hidden by the test)"
    assert status["nvml"].startswith("skipped: the NVML probe cannot start: "), status

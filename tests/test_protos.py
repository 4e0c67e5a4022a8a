"""The checked-in gRPC modules are what ``scripts/generate-protos.sh`` makes of their ``.proto`` copies."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_generated_modules_match_their_protos(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHON": sys.executable}  # the interpreter running the tests has grpcio-tools
    subprocess.run([str(ROOT / "scripts/generate-protos.sh"), str(tmp_path)], check=True, cwd=ROOT, env=env)
    generated = sorted(path.relative_to(tmp_path) for path in tmp_path.rglob("*_pb2*.py*"))
    stale = [str(path) for path in generated if (ROOT / path).read_text() != (tmp_path / path).read_text()]
    assert not stale, f"regenerate with scripts/generate-protos.sh: {stale}"
    checked_in = sorted(path.relative_to(ROOT) for path in ROOT.glob("[!.]*/**/*_pb2*.py*"))
    assert checked_in == generated, "a generated module without its .proto, or a .proto never generated"

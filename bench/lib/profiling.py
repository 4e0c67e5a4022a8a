"""A benchmark's ``--profile FILE``: py-spy samples the server while the load runs (flame graph, raw or speedscope by
the file's suffix)."""

from __future__ import annotations

import math
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def profiled(pid: int, target: Path | None, seconds: float, say: Callable[[str], None]) -> Iterator[None]:
    """Sample the server with py-spy for ``seconds`` while the block runs (nothing when ``target`` is None); ``say``
    tells how it went (the benchmark's progress line)."""
    if target is None:
        yield
        return
    py_spy = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
    formats = {".svg": "flamegraph", ".txt": "raw", ".json": "speedscope"}
    command = [py_spy, "record", "--pid", str(pid), "--duration", str(math.ceil(seconds)), "--rate", "100"]
    command += ["--subprocesses", "--nonblocking", "--output", str(target)]
    command += ["--format", formats.get(target.suffix, "flamegraph")]
    try:
        spy = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    except FileNotFoundError:
        raise SystemExit(f"--profile needs py-spy ({py_spy} not found): .venv/bin/pip install py-spy") from None
    try:
        yield
    finally:
        _out, err = spy.communicate(timeout=seconds + 30.0)
        if spy.returncode == 0:
            say(f"profile of the server written to {target}")
        else:
            say(f"py-spy failed ({spy.returncode}): {err.decode(errors='replace').strip()[-300:]}")

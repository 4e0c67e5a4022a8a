"""Progress of a benchmark, one line at a time on stderr: stdout stays the benchmark's, its last line the JSON."""

from __future__ import annotations

import sys
from collections.abc import Callable


def progress_line(bench: str) -> Callable[[str], None]:
    """The progress printer of ``bench``: ``progress_line("soak")("filling")`` prints ``[bench.soak] filling``."""

    def progress(message: str) -> None:
        print(f"[bench.{bench}] {message}", file=sys.stderr, flush=True)

    return progress

"""Load from a real trace: the Azure LLM inference trace slice shipped in ``data/traces`` (CC-BY-4.0, Patel et al.,
"Splitwise", ISCA 2024), with token counts scaled to the small built-in model. The workload benchmark replays it
into an engine; ``fleetpilot replay`` sends it over HTTP, and the demo gives its requests' sizes to the day it plays
(``demo.load``)."""

from __future__ import annotations

import csv
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

AZURE_CONV_SLICE = Path(__file__).resolve().parent.parent / "data" / "traces" / "azure_conv_slice.csv"
TOKEN_SCALE = 8  # the trace's tokens per token of the small model
MAX_PROMPT_TOKENS = 512
MAX_GENERATED_TOKENS = 128
FILLER = "The quick brown fox jumps over the lazy dog. "


@dataclass(frozen=True)
class TraceRequest:
    arrival_s: float  # after compression, from the first request
    prompt_tokens: int  # scaled, BOS included
    generated_tokens: int  # scaled

    @property
    def prompt(self) -> str:
        """Filler text whose byte-level tokens plus BOS make ``prompt_tokens``."""
        return (FILLER * (self.prompt_tokens // len(FILLER) + 1))[: self.prompt_tokens - 1]


def load_trace(path: Path, limit: int, compression: float) -> list[TraceRequest]:
    """The first ``limit`` rows, scaled: 900 context tokens → 112 prompt tokens, 256 generated → 32."""
    with path.open(newline="") as handle:
        rows = [row for _, row in zip(range(limit), csv.DictReader(handle), strict=False)]
    start = _timestamp(rows[0]["TIMESTAMP"])
    return [
        TraceRequest(
            arrival_s=(_timestamp(row["TIMESTAMP"]) - start) / compression,
            prompt_tokens=min(max(int(row["ContextTokens"]) // TOKEN_SCALE, 1), MAX_PROMPT_TOKENS),
            generated_tokens=min(max(int(row["GeneratedTokens"]) // TOKEN_SCALE, 1), MAX_GENERATED_TOKENS),
        )
        for row in rows
    ]


def _timestamp(text: str) -> float:
    return datetime.fromisoformat(text[:26]).timestamp()  # the trace has 7 fractional digits; Python reads 6

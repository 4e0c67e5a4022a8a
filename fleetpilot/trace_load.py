"""Load from a real trace: the Azure LLM inference trace slice shipped in ``data/traces`` (CC-BY-4.0, Patel et al.,
"Splitwise", ISCA 2024), with token counts scaled to the small built-in model. The workload benchmark replays it
into an engine; the demo replays it over HTTP into the agents' serving APIs."""

from __future__ import annotations

import csv
import itertools
import logging
import threading
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import httpx

log = logging.getLogger(__name__)
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


def replay_over_http(
    trace: list[TraceRequest],
    urls: list[str],
    pool: str,
    stop: threading.Event,
    *,
    tenants: Sequence[Mapping[str, str]],
) -> None:
    """Send the trace's requests at their arrival times, round-robin over ``urls`` and ``tenants`` (each tenant's
    headers: ``Authorization: Bearer <tenant key>``), again and again until ``stop``; answers (429s and 503s
    included) are the load's business, not the caller's."""
    clients = itertools.cycle(urls)
    names = itertools.cycle(tenants)
    period_s = trace[-1].arrival_s + 1.0
    with httpx.Client(timeout=120.0) as client, ThreadPoolExecutor(max_workers=32) as pool_threads:
        for loop in itertools.count():
            started = time.monotonic()
            for request in trace:
                if stop.wait(max(0.0, started + request.arrival_s - time.monotonic())):
                    return
                body = {"model": pool, "prompt": request.prompt, "max_tokens": request.generated_tokens}
                url, tenant = next(clients), next(names)
                pool_threads.submit(_send, client, f"{url}/v1/completions", body, tenant)
            log.info("trace replay: pass %d done (%d requests)", loop + 1, len(trace))
            stop.wait(max(0.0, started + period_s - time.monotonic()))


def _send(client: httpx.Client, url: str, body: dict[str, object], tenant: Mapping[str, str]) -> None:
    try:
        client.post(url, json=body, headers=dict(tenant))
    except httpx.HTTPError as exc:
        log.debug("trace replay: %s: %s", url, exc)

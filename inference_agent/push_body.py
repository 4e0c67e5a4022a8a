"""A push's body as the agent sends it: JSON (CONTRACT section 5), or the compact encoding (``wire.columnar``) once
the collector offers it in an answer's ``Accept-Post``; ``bench.ingest`` and ``bench.soak`` send the same bodies."""

from __future__ import annotations

import gzip
import json
import logging
from typing import Any

import httpx

from wire import columnar
from wire.samples import SampleJson

log = logging.getLogger(__name__)


def push_body(
    node_id: str,
    samples: list[SampleJson],
    *,
    report: dict[str, Any] | None,
    inventory: dict[str, Any] | None,
    compact: bool,
) -> tuple[str, bytes]:
    """A push's media type and gzipped body: the compact encoding when ``compact`` (offered) and able to hold the
    batch, else JSON (a batch it cannot hold goes as JSON, for the collector to refuse with its reason)."""
    if compact:
        try:
            raw = columnar.encode_columns(node_id, samples, report=report, inventory=inventory)
        except columnar.NotEncodable as exc:
            log.debug("batch sent as JSON: %s", exc)
        else:
            return columnar.MEDIA_TYPE, gzip.compress(raw, compresslevel=1)
    body: dict[str, Any] = {"node_id": node_id, "samples": samples}
    if inventory is not None:
        body["inventory"] = inventory
    if report is not None:
        body["report"] = report
    return "application/json", gzip.compress(json.dumps(body, separators=(",", ":")).encode(), compresslevel=5)


def offers_compact(answer: httpx.Response) -> bool:
    """Whether the collector's answer offers the compact encoding (``Accept-Post`` lists its media type)."""
    offered = answer.headers.get("accept-post", "")
    return any(part.split(";", 1)[0].strip().lower() == columnar.MEDIA_TYPE for part in offered.split(","))

"""``GET /api/v1/unmapped-families``: the metric families remote write and OTLP senders send that no mapping source
reads (``collector.remote.unmapped``), so a series that vanished can be found: by protocol and name, with its samples
and when it was first and last seen."""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, Query
from pydantic import BaseModel, Field

from collector.errors import InvalidQuery
from collector.remote.series import SourceKind
from collector.remote.unmapped import MAX_NAME_LENGTH, UnmappedFamily
from web.auth import ServicesDep, ViewerToken
from web.errors import ERROR_RESPONSES

router = APIRouter(tags=["remote write"], responses=ERROR_RESPONSES)
SOURCES: tuple[SourceKind, ...] = ("remote_write", "otlp")


class UnmappedOut(BaseModel):
    source: Literal["remote_write", "otlp"] = Field(description="the protocol it came by")
    name: str = Field(
        description=f"the family: a histogram's _bucket, _count and _sum are one; cut at {MAX_NAME_LENGTH}"
    )
    samples: int = Field(description="samples received since it was first seen (written every ~10 s)")
    first_seen: float
    last_seen: float


class UnmappedPage(BaseModel):
    items: list[UnmappedOut]
    next: str | None
    max_families: int = Field(description="names kept per protocol; a new name past it is not kept")
    full: list[Literal["remote_write", "otlp"]] = Field(description="the protocols holding max_families names")


@router.get("/unmapped-families")
def unmapped_families(
    services: ServicesDep,
    _token: ViewerToken,
    source: Annotated[Literal["remote_write", "otlp"] | None, Query(description="one protocol")] = None,
    cursor: Annotated[str | None, Query(max_length=300, description="the `next` of the previous page")] = None,
    limit: Annotated[int, Query(ge=1, le=2000)] = 1000,
) -> UnmappedPage:
    """The families no mapping source reads, by protocol then name; a name not sent for
    ``remote_write_idle_series_seconds`` is forgotten."""
    kept = services.remote.unmapped
    found = kept.families(source=source, after=_after(cursor), limit=limit + 1)
    page = found[:limit]
    return UnmappedPage(
        items=[UnmappedOut(**vars(f)) for f in page],
        next=_cursor(page[-1]) if len(found) > limit else None,
        max_families=kept.max_families,
        full=kept.full(),
    )


def _cursor(last: UnmappedFamily) -> str:
    return f"{last.source}:{last.name}"


def _after(cursor: str | None) -> tuple[str, str] | None:
    """``otlp:app_queue_length`` → ("otlp", "app_queue_length"); the name may hold colons (``vllm:…``)."""
    if cursor is None:
        return None
    source, sep, name = cursor.partition(":")
    if not sep or source not in SOURCES:
        raise InvalidQuery("cursor", f"not a cursor this API gave: {cursor[:80]!r}")
    return source, name

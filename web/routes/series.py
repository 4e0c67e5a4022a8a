"""``GET /api/v1/series``: one metric over time for a node, device, pool or the fleet."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query
from pydantic import BaseModel

from collector.aggregate import Stat
from collector.series import SeriesQuery, SeriesReader, Source
from web.auth import ServicesDep, ViewerToken
from web.errors import ERROR_RESPONSES
from web.timeparam import parse_time

router = APIRouter(tags=["series"], responses=ERROR_RESPONSES)
DEFAULT_RANGE_SECONDS = 900.0


class SeriesOut(BaseModel):
    metric: str
    source: Source
    step: float | None
    points: list[tuple[float, float]]


@router.get("/series")
def series(
    services: ServicesDep,
    _token: ViewerToken,
    metric: str,
    node: str | None = None,
    device: Annotated[int | None, Query(ge=0, le=1023)] = None,
    pool: str | None = None,
    start: Annotated[str | None, Query(description="Unix seconds or ISO-8601; default end − 15 min")] = None,
    end: Annotated[str | None, Query(description="Unix seconds or ISO-8601; default now")] = None,
    step: Annotated[float | None, Query(allow_inf_nan=False, description="bucket width in seconds")] = None,
    stat: Stat = Stat.MEAN,
) -> SeriesOut:
    """Raw samples for ranges up to ``raw_query_max_seconds``, 1-minute rollups beyond."""
    end_ts = parse_time("end", end) if end is not None else services.clock()
    start_ts = parse_time("start", start) if start is not None else end_ts - DEFAULT_RANGE_SECONDS
    query = SeriesQuery(metric, start_ts, end_ts, node=node, device=device, pool=pool, step=step, stat=stat)
    result = SeriesReader(services.engine).query(query, raw_max_seconds=services.settings.raw_query_max_seconds)
    return SeriesOut(metric=metric, source=result.source, step=result.step, points=result.points)

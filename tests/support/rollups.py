"""Rolled-up minutes written straight into storage, for tests of what reads them (forecasts, capacity plans)."""

from __future__ import annotations

from typing import Any

from sqlalchemy import Connection, insert

from collector.rollups import WATERMARK_NAME
from collector.tables import ROLLUP_STATS, job_state, rollup_column, rollups_1m


def rollup_row(node: str, device: int, pool: str, bucket: float, **metrics: float) -> dict[str, Any]:
    """One minute of one series with every stat of each given metric at ``value``; other columns null."""
    row: dict[str, Any] = {c.name: None for c in rollups_1m.columns}  # executemany wants the same keys in every row
    row.update(node_id=node, device=device, pool=pool, bucket=bucket, samples=120)
    for name, value in metrics.items():
        for stat in ROLLUP_STATS:
            row[rollup_column(name, stat)] = value
    return row


def set_watermark(conn: Connection, watermark: float) -> None:
    """Say the rollup job has rolled every minute before ``watermark``."""
    conn.execute(insert(job_state).values(name=WATERMARK_NAME, watermark=watermark))

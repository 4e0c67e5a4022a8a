"""The receiver's staging: the series a Prometheus sends, and their raw points for the last few minutes.

Load metrics are derived from a whole scrape of one exporter (a histogram's buckets, a counter's label sets), but
Prometheus spreads one scrape over several requests (its shards, ``max_samples_per_send``). So each point is kept
here first, keyed ``(series_id, ts)`` — a resent WriteRequest or a WAL replay hits the key and stores nothing — and
each (source, node, GPU, pool) group's sample at that scrape time is derived again from every point staged for it
(``collector.remote.receiver``). Points older than the receiver's window are pruned by the retention job.
"""

from __future__ import annotations

from sqlalchemy import JSON, BigInteger, Column, Double, Index, Integer, String, Table

from collector.tables import metadata

remote_series = Table(
    "remote_series",
    metadata,
    Column("id", BigInteger, primary_key=True),  # a hash of the series' labels, __name__ included
    Column("group_id", BigInteger, nullable=False),  # a hash of (source, node, device, pool)
    Column("source", String(64), nullable=False),
    Column("node_id", String(128), nullable=False),
    Column("device", Integer, nullable=False),  # NO_DEVICE when none
    Column("pool", String(128), nullable=False),  # NO_POOL when none
    Column("name", String(255), nullable=False),
    Column("labels", JSON, nullable=False),  # every label but __name__
    Column("first_seen", Double, nullable=False),
    Column("last_seen", Double, nullable=False),
    Index(None, "source"),
    Index(None, "last_seen"),
)

remote_points = Table(
    "remote_points",
    metadata,
    Column("series_id", BigInteger, primary_key=True),
    Column("ts", Double, primary_key=True),
    Column("group_id", BigInteger, nullable=False),
    Column("value", Double, nullable=False),
    Index(None, "group_id", "ts"),
    Index(None, "ts"),
)

# Families no mapping source reads, by the protocol they came by (collector.remote.unmapped): what a sender sends in
# vain, kept bounded (a name at most 200 characters, at most 1,000 names per protocol) and forgotten when idle.
remote_unmapped = Table(
    "remote_unmapped",
    metadata,
    Column("source", String(16), primary_key=True),  # "remote_write" or "otlp"
    Column("name", String(200), primary_key=True),
    Column("samples", BigInteger, nullable=False),
    Column("first_seen", Double, nullable=False),
    Column("last_seen", Double, nullable=False),
    Index(None, "last_seen"),
)

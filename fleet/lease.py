"""Leader election through a lease row in the database: only one controller acts when several servers run.

``acquire(now)`` takes the lease when it is free or expired, or renews it when this holder has it, in one
conditional UPDATE (or the first INSERT): two servers racing on one PostgreSQL cannot both win, because the
database serialises the UPDATE on the row and only one sees the old holder. A holder that stops renewing loses it
``ttl_seconds`` later, and another server takes over at its next tick.
"""

from __future__ import annotations

from sqlalchemy import Column, Double, Engine, String, Table, or_, select, update

from collector.database import insert_for
from collector.tables import metadata

leases = Table(
    "leases",
    metadata,
    Column("name", String(64), primary_key=True),
    Column("holder", String(128), nullable=False),
    Column("expires_at", Double, nullable=False),
)


class Lease:
    def __init__(self, engine: Engine, name: str, holder: str, ttl_seconds: float) -> None:
        if ttl_seconds <= 0:
            raise ValueError(f"ttl_seconds: must be positive, got {ttl_seconds}")
        self.engine = engine
        self.name = name
        self.holder = holder
        self.ttl_seconds = ttl_seconds

    def acquire(self, now: float) -> bool:
        """True when this holder has the lease until ``now + ttl_seconds``."""
        expires = now + self.ttl_seconds
        with self.engine.begin() as conn:
            taken = conn.execute(
                update(leases)
                .where(leases.c.name == self.name, or_(leases.c.holder == self.holder, leases.c.expires_at < now))
                .values(holder=self.holder, expires_at=expires)
            ).rowcount
        if taken == 1:
            return True
        with self.engine.begin() as conn:  # no row yet: the first INSERT wins, a racing one does nothing
            conn.execute(
                insert_for(self.engine, leases)
                .values(name=self.name, holder=self.holder, expires_at=expires)
                .on_conflict_do_nothing(index_elements=["name"])
            )
            # rowcount of INSERT .. ON CONFLICT DO NOTHING is not reliable on every driver: read who holds it
            holder = conn.scalar(select(leases.c.holder).where(leases.c.name == self.name))
        return bool(holder == self.holder)

    def release(self) -> None:
        """Give the lease up at once (a server shutting down), so another takes over without waiting the TTL."""
        with self.engine.begin() as conn:
            conn.execute(
                update(leases).where(leases.c.name == self.name, leases.c.holder == self.holder).values(expires_at=0.0)
            )

"""Did every acknowledged sample reach the database? A node sends its batches in order and moves on only after an
acknowledgement, so per node every ``seq`` from 1 to the last acknowledged one must be stored."""

from __future__ import annotations

from sqlalchemy import Engine, func, select

from collector.tables import samples


def lost_by_seq(engine: Engine, acknowledged: dict[str, int]) -> tuple[int, int]:
    """(rows stored, acknowledged samples missing): per node, every ``seq`` from 1 to the last acknowledged one must
    be in the database (a node sends in order and moves on only after an acknowledgement)."""
    with engine.connect() as conn:
        query = select(samples.c.node_id, func.count(), func.max(samples.c.seq)).group_by(samples.c.node_id)
        per_node = {node: (int(count), int(highest)) for node, count, highest in conn.execute(query)}
        lost = 0
        for node_id, last_seq in acknowledged.items():
            count, highest = per_node.get(node_id, (0, 0))
            if highest > last_seq:  # a push stored whose answer never came back: it would be resent, not counted
                where = (samples.c.node_id == node_id) & (samples.c.seq <= last_seq)
                count = int(conn.scalar(select(func.count()).where(where)) or 0)
            lost += last_seq - count
    return sum(count for count, _ in per_node.values()), lost

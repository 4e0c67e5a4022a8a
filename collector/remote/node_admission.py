"""Which nodes one remote-write or OTLP request may write: never an agent's, only those its token's scope names, and
no more new ones than the token's node bound. Pure: the receiver reads the nodes and counts, this decides.

A remote_write token wrote as any node, agents' included: queue 5,000, 66,667 requests/s and 99 °C on a live
agent's node fed its alerts and scaling; two 24 KB requests made 3,000 nodes (and 3,011 critical NodeDown alerts).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from fnmatch import fnmatchcase

from collector.remote.mapping import Unplaced
from collector.remote.staging import Dropped, Staged, StagedSeries


@dataclass(frozen=True)
class Sender:
    """Who sends: the remote_write token's id, the node-name globs it may write (None: any node), and the nodes that
    agent tokens name (an agent's even before its first push)."""

    token_id: str
    node_scope: tuple[str, ...] | None = None
    agent_nodes: frozenset[str] = field(default_factory=frozenset)


@dataclass(frozen=True)
class KnownNode:
    source: str  # "agent", "remote_write" or "otlp" (nodes.source)
    token_id: str | None  # the remote_write token that registered it (nodes.remote_token_id)


def admit(
    staged: Sequence[StagedSeries],
    sender: Sender,
    known: Mapping[str, KnownNode],
    *,
    token_nodes: int,
    max_nodes: int,
    into: Staged,
) -> list[StagedSeries]:
    """The series ``sender`` may write; the others dropped into ``into`` by reason. ``token_nodes``: the nodes the
    token registered that are still seen; a new node past ``max_nodes`` of them is refused (1,000 by default)."""
    verdicts: dict[str, Unplaced | None] = {}
    new = 0
    for node in sorted({s.place.node_id for s in staged}):
        verdict = _refusal(node, sender, known.get(node))
        if verdict is None and node not in known:
            if token_nodes + new >= max_nodes:
                verdict = Unplaced(
                    Dropped.NODE_LIMIT,
                    f"node {node!r} would be this token's node {token_nodes + new + 1}; "
                    f"remote_write_max_nodes_per_token is {max_nodes}",
                )
            else:
                new += 1
        verdicts[node] = verdict
    kept = []
    for s in staged:
        verdict = verdicts[s.place.node_id]
        if verdict is None:
            kept.append(s)
        else:
            into.drop(verdict, len(s.points))
    return kept


def _refusal(node: str, sender: Sender, known: KnownNode | None) -> Unplaced | None:
    if node in sender.agent_nodes or (known is not None and known.source == "agent"):
        return Unplaced(
            Dropped.AGENT_NODE, f"node {node!r} is an agent's (it reports itself); remote write may not write it"
        )
    if sender.node_scope is not None and not any(fnmatchcase(node, glob) for glob in sender.node_scope):
        return Unplaced(
            Dropped.OUT_OF_SCOPE,
            f"node {node!r} is outside this token's node scope ({', '.join(sender.node_scope)})",
        )
    return None

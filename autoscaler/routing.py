"""Routing weights per node, pure: ``weight = α·compute_util + β·mem_util + γ·network_latency`` (lower is better).

Each term is on 0..1: compute and memory use are ratios already; network latency is divided by the largest among
the nodes compared, so the slowest node scores 1. α, β and γ are normalised to sum to 1. A node without a reading
for a term (no GPU, no push yet) is scored on the terms it has, with their coefficients renormalised — an absent
reading is never read as 0 (idle) or 1 (saturated). A node with no reading at all has no weight.

>>> w = routing_weights([NodeLoad("a", 0.2, 0.5, 0.001), NodeLoad("b", 0.8, 0.5, 0.002)], Coefficients(0.5, 0.3, 0.2))
>>> round(w["a"], 3), round(w["b"], 3)
(0.35, 0.75)
"""

from __future__ import annotations

from collections.abc import Sequence

from fleet.pools import Coefficients
from fleet.view import NodeLoad


def routing_weights(nodes: Sequence[NodeLoad], coefficients: Coefficients) -> dict[str, float]:
    latencies = [n.network_latency_s for n in nodes if n.network_latency_s is not None]
    worst_latency = max(latencies, default=0.0)
    weights: dict[str, float] = {}
    for node in nodes:
        latency = None
        if node.network_latency_s is not None:
            latency = node.network_latency_s / worst_latency if worst_latency > 0 else 0.0
        terms = [
            (coefficients.alpha, node.compute_util),
            (coefficients.beta, node.mem_util),
            (coefficients.gamma, latency),
        ]
        present = [(c, v) for c, v in terms if v is not None and c > 0]
        total = sum(c for c, _ in present)
        if total > 0:
            weights[node.node_id] = sum(c * v for c, v in present) / total
    return weights

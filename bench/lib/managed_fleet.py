"""A managed fleet for the benchmarks' ``--managed``: 20 pools and 15 tenants with quotas, made through the REST API.

Without pools or tenants the server has nothing to tell a node, so every ingest answer's ``desired`` is null and
its cost is never measured. With them, each simulated node reports one of the pools (node i → pool i mod 20), the
local actuator gives it a share of that pool, and the tenants' admission limits on it come along: every answer then
carries a desired state, as in a production fleet.
"""

from __future__ import annotations

import httpx

from fleetpilot.launch import ServerProcess

POOLS = 20
TENANTS = 15
POOLS_PER_TENANT = 3
# 15 tenants × 3 pools = 45 quotas over 20 pools: at most 3 tenants a pool, 3 × 20 % = 60 % of a GPU's threads,
# inside the 100 % the guaranteed (standard) tenants of one pool may take together.
THREAD_PERCENT = 20


def pool_names() -> list[str]:
    """pool-00 .. pool-19."""
    return [f"pool-{i:02d}" for i in range(POOLS)]


def pools_by_node(node_ids: list[str]) -> dict[str, str]:
    """The pool each node reports, spreading the nodes round-robin over the pools."""
    names = pool_names()
    return {node_id: names[i % POOLS] for i, node_id in enumerate(node_ids)}


def tenant_quotas() -> dict[str, list[str]]:
    """The pools each tenant has a quota on: tenant-i on pools 4i, 4i+1, 4i+2 (mod 20), so every pool has one."""
    names = pool_names()
    return {f"tenant-{t:02d}": [names[(4 * t + k) % POOLS] for k in range(POOLS_PER_TENANT)] for t in range(TENANTS)}


def create_managed_fleet(server: ServerProcess) -> None:
    """The pools (policy reactive, mode act), the tenants, and their quotas, as an operator would create them."""
    headers = {"Authorization": f"Bearer {server.admin_token}"}
    with httpx.Client(base_url=server.url, headers=headers, timeout=10.0) as client:
        for name in pool_names():
            _ok(client.post("/api/v1/pools", json={"name": name, "policy": "reactive", "mode": "act"}))
        for t, (tenant, pools) in enumerate(tenant_quotas().items()):
            _ok(client.post("/api/v1/tenants", json={"name": tenant}))
            quota = {"rate_rps": 10.0 + 5 * t, "max_concurrency": 2 + t % 6, "active_thread_percentage": THREAD_PERCENT}
            for pool in pools:
                _ok(client.put(f"/api/v1/tenants/{tenant}/quotas/{pool}", json=quota))


def _ok(response: httpx.Response) -> None:
    """Stop the benchmark with the server's own words when it refuses a change."""
    if response.is_error:
        raise RuntimeError(
            f"{response.request.method} {response.request.url.path}: {response.status_code} {response.text}"
        )

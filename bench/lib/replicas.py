"""Waiting for an agent's replicas: every pool on its serving API with a warm replica and none starting."""

from __future__ import annotations

import time

import httpx

from fleetpilot.launch import AgentProcess

REPLICAS_READY_TIMEOUT_S = 120.0


def wait_for_replicas(agent: AgentProcess, timeout_s: float = REPLICAS_READY_TIMEOUT_S) -> None:
    """Until the agent's serving API says every pool has a warm replica and none starting (a replacement done)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            pools = httpx.get(f"{agent.serve_url}/healthz", timeout=2.0).json()["pools"]
            if pools and all(p["ready"] >= 1 and p["starting"] == 0 for p in pools.values()):
                return
        except (httpx.HTTPError, ValueError, KeyError):
            pass
        time.sleep(0.2)
    raise TimeoutError(f"replicas not warm within {timeout_s:.0f} s:\n{agent.log_tail()}")

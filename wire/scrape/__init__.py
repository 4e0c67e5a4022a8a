"""Load metrics derived from Prometheus exposition: the arithmetic, the signals and each engine's table.

Shared by the agent's engine probes (which scrape an engine's ``/metrics``) and the remote-write receiver (which is
sent the same series by a team's Prometheus), so a vLLM queue or p99 means the same whichever way it arrived.
"""

"""What the web layer reads of the server's settings, as a Protocol: the composition root passes its settings in
(``fleetpilot.settings.ServerSettings`` satisfies it), and web never imports the room above it. Attributes, not
read-only properties: a test may set one on the settings it built."""

from __future__ import annotations

from typing import Protocol


class WebSettings(Protocol):
    ingest_max_body_bytes: int
    ingest_max_samples: int
    ingest_max_in_flight: int
    ingest_shed_queue_seconds: float
    ingest_shed_loop_lag_seconds: float
    ingest_max_future_seconds: float
    ingest_max_pools_per_node: int
    remote_write_max_concurrent_decodes: int
    node_max_replicas: int
    auth_max_failures: int
    auth_failure_window_seconds: float
    trusted_proxies: list[str]
    api_max_body_bytes: int
    scrape_token: str | None
    raw_query_max_seconds: float
    gpu_hour_cost: float
    gpus_per_node: int
    manual_scale_seconds: float
    webhook_allowed_hosts: list[str]
    webhook_allowed_networks: list[str]
    session_secret: str | None
    session_lifetime_seconds: float
    dashboard_live_streams_per_session: int
    dashboard_live_streams_per_process: int
    dashboard_live_reads_at_once: int
    kubernetes_agent_auth: bool
    kubernetes_token_audience: str
    kubernetes_agent_service_accounts: list[str]
    kubernetes_token_cache_seconds: float

    @property
    def ingest_sample_age_limit_seconds(self) -> float: ...

    @property
    def secure_cookies(self) -> bool: ...

"""Typed settings of the server deployable: flags, then ``FLEETPILOT_*`` variables, then defaults.

Settings are built once at start (``ServerSettings(**flags)``), validated there, and passed in; nothing reads them
from a module global.
"""

from __future__ import annotations

import ipaddress
import os
from enum import StrEnum
from pathlib import Path

from pydantic import Field, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from autoscaler.hpa import KUBERNETES_SCALE_DOWN_WINDOW_S
from fleetpilot.secret_strength import weak_secret_problem

DEFAULT_DATABASE_URL = "sqlite:///./.fleetpilot/fleetpilot.db"


class Environment(StrEnum):
    DEVELOPMENT = "development"
    PRODUCTION = "production"


class ActuatorKind(StrEnum):
    LOCAL = "local"  # the fleetpilot agents, through the ingest answer
    KUBERNETES = "kubernetes"  # the scale subresource of each pool's scale_target (any kind, any namespace)


def _is_loopback(host: str) -> bool:
    """Whether ``host`` is reachable from this machine only: ``localhost``, ``127.0.0.1``, ``::1``."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class ServerSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="FLEETPILOT_", extra="forbid")

    environment: Environment = Environment.DEVELOPMENT
    host: str = "127.0.0.1"
    port: int = Field(8080, ge=0, le=65535)
    # KEDA's external scaler (gRPC, autoscaler.keda) on this port of ``host``; unset: not served.
    keda_port: int | None = Field(None, ge=0, le=65535)
    # Its TLS, all three or none: the server's certificate and key, and the CA whose client certificates it accepts
    # (KEDA's caCert, tlsClientCert, tlsClientKey); required outside development unless ``host`` is loopback.
    keda_tls_cert_file: Path | None = None
    keda_tls_key_file: Path | None = None
    keda_tls_client_ca_file: Path | None = None
    # StreamIsActive streams open at once: each holds a worker thread, and the server has 4 more, so 12 held streams
    # leave GetMetrics and IsActive 4 (past it: RESOURCE_EXHAUSTED). One per ScaledObject of type external-push.
    keda_max_streams: int = Field(12, ge=1, le=1_000)
    database_url: str = DEFAULT_DATABASE_URL
    # A token to install as the first admin token instead of generating one (e.g. from a Kubernetes Secret).
    admin_token: str | None = None

    # Ingest/API processes sharing the one port (uvicorn's supervisor restarts one that dies); unset: the machine's
    # cores on PostgreSQL, 1 on SQLite, whose one writer every process would queue at (worker_processes).
    workers: int | None = Field(None, ge=1, le=256)
    # Connections the kernel holds for a process before it accepts them; past it new connections wait in SYN retries
    # (the agent's connect timeout) instead of piling up behind a busy event loop.
    accept_backlog: int = Field(1024, ge=16, le=65_535)
    # How long the server keeps an idle HTTP connection open: longer than any sender keeps one, so the sender closes
    # first. Prometheus' remote-write client keeps one 5 minutes (prometheus/common's http client default), the
    # OpenTelemetry Collector 90 s; at uvicorn's 5 s a batch sent as the server closed met "connection reset by peer"
    # or "EOF" and was retried (3 times in 20 minutes, 142 samples). An idle connection costs a few kB.
    http_keep_alive_seconds: int = Field(310, ge=1, le=3_600)

    ingest_max_body_bytes: int = Field(8 * 1024 * 1024, gt=0)
    ingest_max_samples: int = Field(20_000, gt=0)
    ingest_max_in_flight: int = Field(32, gt=0)
    # Overload (web.ingest_gate, collector.ingest): a batch is refused at the door with 503 and Retry-After while
    # the oldest batch waits this long for its commit, or the event loop runs this late; one that waited past the
    # deadline by the time its commit starts is not written (its agent, 10 s timeout, would resend it anyway).
    ingest_shed_queue_seconds: float = Field(1.0, gt=0)
    ingest_shed_loop_lag_seconds: float = Field(0.5, gt=0)
    ingest_commit_deadline_seconds: float = Field(5.0, gt=0)
    ingest_max_future_seconds: float = Field(300.0, ge=0)
    # Bounds on what one agent reports: distinct pools per node (samples naming more are refused and counted) and
    # replicas per node (a reported replica count past it is refused).
    ingest_max_pools_per_node: int = Field(64, ge=1, le=10_000)
    node_max_replicas: int = Field(256, ge=1, le=100_000)
    # How far back an agent's sample may be; older ones are refused one by one and counted (collector.sample_age).
    # Unset: the raw retention window less 10 minutes. At most the window: an older sample would be deleted by the
    # next retention pass, and its minute's rollup re-rolled from that one sample.
    ingest_max_sample_age_seconds: float | None = Field(None, gt=0)
    # Prometheus remote write and OTLP in (collector.remote): the mapping from series to nodes, GPUs, pools and
    # metrics (unset: the shipped collector/remote/default-mapping.yaml), the series one request may carry, how far
    # back a point may come (staged that long), the longest scrape gap a rate spans, and when an idle series is
    # forgotten (it then no longer counts toward its source's max_series).
    remote_write_mapping: Path | None = None
    remote_write_max_series_per_request: int = Field(50_000, ge=1, le=1_000_000)
    remote_write_window_seconds: float = Field(600.0, ge=60, le=86_400)
    remote_write_max_gap_seconds: float = Field(150.0, gt=0, le=3_600)
    remote_write_idle_series_seconds: float = Field(3_600.0, ge=60)
    # What one remote-write or OTLP body may hold, counted on the wire before it is decoded (413 past them; an OTLP
    # histogram's bucket is a sample), the bytes of one label's name or value, the nodes one remote_write token may
    # have registered and still send (seen within remote_write_idle_series_seconds), and the bodies decoded at once
    # (each ~100 MB at the bounds; past it 503 + Retry-After).
    remote_write_max_samples_per_request: int = Field(500_000, ge=1, le=10_000_000)
    remote_write_max_labels_per_request: int = Field(500_000, ge=1, le=10_000_000)
    remote_write_max_label_bytes: int = Field(2048, ge=64, le=65_536)
    remote_write_max_nodes_per_token: int = Field(1000, ge=1, le=1_000_000)
    remote_write_max_concurrent_decodes: int = Field(4, ge=1, le=256)
    node_down_after_seconds: float = Field(3.0, gt=0)
    # how long a token's verdict is cached; a deleted token stops working everywhere within ~1 s regardless (web.tokens)
    token_cache_seconds: float = Field(300.0, ge=0)
    # Failed API authentications (no token, an unknown token) per client address: past this many within the window
    # the address is answered 429 with Retry-After until its oldest failure leaves the window.
    auth_max_failures: int = Field(20, ge=1, le=100_000)
    auth_failure_window_seconds: float = Field(60.0, gt=0, le=86_400)
    # Proxies (a JSON list of addresses or CIDRs) whose X-Forwarded-For names the client; from anyone else the header
    # is ignored and the connection's own address counts (the failed-authentication limiter keys on it).
    trusted_proxies: list[str] = Field(default_factory=list)
    # Every API body other than ingest's is read up to this size (after authentication); past it, 413.
    api_max_body_bytes: int = Field(1024 * 1024, gt=0)
    # When set, /metrics, /openapi.json and /docs answer only `Authorization: Bearer <scrape_token>` (or a valid API
    # token); unset, they are open as Prometheus scrapes usually are.
    scrape_token: str | None = None

    raw_retention_hours: float = Field(24.0, gt=0)
    rollup_retention_days: float = Field(30.0, gt=0)
    rollup_interval_seconds: float = Field(60.0, gt=0)
    # Each rollup run re-rolls this much before its watermark; older arrivals go through the rollup backlog, which
    # re-rolls just their (node, minute). Two minutes cover a push every 5 s and its commit many times over; each
    # run reads (lookback + 1 minute) of every node's samples, so 600 s read 11× what the minute added.
    rollup_lookback_seconds: float = Field(120.0, ge=0)
    retention_interval_seconds: float = Field(300.0, gt=0)
    # Series queries over ranges longer than this read 1-minute rollups instead of raw samples.
    raw_query_max_seconds: float = Field(3600.0, gt=0)

    # The forecast loop (predictor.loop): how often, how far ahead, from how much history, with which model.
    forecast_interval_seconds: float = Field(60.0, gt=0)
    forecast_horizon_seconds: float = Field(900.0, gt=0)
    forecast_timeout_seconds: float = Field(30.0, gt=0)
    forecast_pool_history_hours: float = Field(48.0, gt=0)
    forecast_node_history_hours: float = Field(2.0, gt=0)
    forecast_model: str = "auto"
    # Memory (a GPU's, a KV cache's) counts as exhausted past this share of its total.
    forecast_exhaustion_ratio: float = Field(0.95, gt=0, le=1)
    # Per-replica capacity is learned from the raw samples of this window, again every refresh.
    capacity_window_seconds: float = Field(3600.0, gt=0)
    capacity_refresh_seconds: float = Field(600.0, gt=0)
    # Capacity planning: what a GPU-hour costs (0 = not given: plans carry no cost) and GPUs per node.
    gpu_hour_cost: float = Field(0.0, ge=0)
    gpus_per_node: int = Field(8, ge=1)

    # The autoscaler (autoscaler.controller): how often it decides, how it acts, who leads.
    autoscale_interval_seconds: float = Field(5.0, gt=0)
    # A scale-down waits until every recommendation of this window agrees (HPA's
    # behavior.scaleDown.stabilizationWindowSeconds, default 300 s); stretched to a pool's replica startup, if longer.
    scale_down_window_seconds: float = Field(KUBERNETES_SCALE_DOWN_WINDOW_S, ge=0)
    actuator: ActuatorKind = ActuatorKind.LOCAL
    kubernetes_namespace: str = "default"  # where a pool without a scale_target has its Deployment
    # Agents on Kubernetes authenticate with their pod's projected ServiceAccount token (web.kube_tokens): a
    # TokenReview for this audience, of one of these ServiceAccounts ("namespace/name", a JSON list), the verdict
    # cached this long and never past the token's exp. Per-node fleetpilot tokens keep working beside it.
    kubernetes_agent_auth: bool = False
    kubernetes_token_audience: str = Field("fleetpilot", min_length=1)
    kubernetes_agent_service_accounts: list[str] = Field(default_factory=lambda: ["fleetpilot/fleetpilot-agent"])
    kubernetes_token_cache_seconds: float = Field(60.0, ge=0, le=3600)
    # TokenReviews in flight at once (past it: 503 with Retry-After at once): 8 of the API's 40 worker threads, and
    # at ~10 ms a review still ~800 reviews/s, where 1,000 agents rotating hourly need ~0.3/s. Accepted tokens kept
    # in the cache (least recently used evicted first; refusals are kept apart and never evict them).
    kubernetes_token_max_concurrent_reviews: int = Field(8, ge=1, le=256)
    kubernetes_token_cache_max_tokens: int = Field(10_000, ge=1, le=1_000_000)
    # A manual scale through the API overrides the policy this long unless the request says otherwise.
    manual_scale_seconds: float = Field(1800.0, gt=0)
    # Replicas a node without GPUs may run in all (a node with GPUs: one per GPU).
    cpu_replicas_per_node: int = Field(4, ge=1)
    # The leader lease: one controller acts across servers; another takes over this long after it stops.
    leader_lease_seconds: float = Field(15.0, gt=0)

    # Noisy-neighbour enforcement (isolation.enforcer): how often it judges, when a tenant is noisy, how many
    # consecutive windows throttle or restore it. It holds its own lease of leader_lease_seconds.
    enforce_interval_seconds: float = Field(10.0, gt=0)
    enforce_noisy_compute_share: float = Field(0.8, gt=0, lt=1)
    enforce_trigger_windows: int = Field(3, ge=1)
    enforce_calm_windows: int = Field(3, ge=1)

    # Alerting (alerting.evaluator, alerting.outbox): how often every rule is judged (on the server holding the
    # "alerting" lease), when a firing alert whose series went silent resolves, and what payloads link back to.
    alert_evaluation_interval_seconds: float = Field(1.0, gt=0)
    alert_unseen_resolve_seconds: float = Field(600.0, gt=0)
    alert_external_url: str | None = None  # default http://HOST:PORT
    # Resolved alerts, finished notifications and delivery attempts are deleted after this many days.
    alert_history_days: float = Field(30.0, gt=0)
    # Webhook delivery: each attempt's timeout, how often due retries are looked for, the exponential backoff
    # (with jitter) between attempts, how long a notification is retried before it is abandoned, and the hosts a
    # webhook URL may name (a JSON list; exact names or "*.example.com"; empty: any host).
    webhook_timeout_seconds: float = Field(5.0, gt=0)
    webhook_poll_seconds: float = Field(1.0, gt=0)
    webhook_backoff_initial_seconds: float = Field(1.0, gt=0)
    webhook_backoff_max_seconds: float = Field(300.0, gt=0)
    webhook_max_age_hours: float = Field(24.0, gt=0)
    webhook_allowed_hosts: list[str] = Field(default_factory=list)
    # Webhook targets resolving to loopback, private, link-local or cloud-metadata addresses are refused unless the
    # address is inside one of these networks (a JSON list of CIDRs, e.g. ["10.0.0.0/8"]).
    webhook_allowed_networks: list[str] = Field(default_factory=list)

    # The dashboard's session cookie is HMAC-signed with this key (at least 32 characters). Unset: a random key per
    # process, so sessions end at a restart and do not carry across servers behind one load balancer.
    session_secret: str | None = None
    session_lifetime_seconds: float = Field(8 * 3600.0, ge=60, le=30 * 86400.0)
    # The session cookie's Secure attribute; unset: on everywhere but in development.
    cookie_secure: bool | None = None
    # The dashboard's live streams (web.dashboard.live_stream): open at once per session (a browser over HTTP/1.1
    # holds at most 6 connections to a host, so 8 is every tab of one browser and then some) and per server process
    # (past either: 429), and how many of their reads run at once, each on a connection of its own (SQLite's pool
    # holds 15: 4 leave 11 to the API, ingest and the background jobs).
    dashboard_live_streams_per_session: int = Field(8, ge=1, le=1_000)
    dashboard_live_streams_per_process: int = Field(64, ge=1, le=100_000)
    dashboard_live_reads_at_once: int = Field(4, ge=1, le=64)

    @model_validator(mode="after")
    def _known_forecaster(self) -> ServerSettings:
        from predictor.registry import FORECASTER_NAMES

        if self.forecast_model not in FORECASTER_NAMES:
            raise ValueError(f"forecast_model: unknown {self.forecast_model!r}; known: {', '.join(FORECASTER_NAMES)}")
        return self

    @model_validator(mode="after")
    def _webhook_backoff(self) -> ServerSettings:
        if self.webhook_backoff_max_seconds < self.webhook_backoff_initial_seconds:
            raise ValueError("webhook_backoff_max_seconds: must be at least webhook_backoff_initial_seconds")
        return self

    @model_validator(mode="after")
    def _agent_service_accounts(self) -> ServerSettings:
        for entry in self.kubernetes_agent_service_accounts:
            namespace, slash, name = entry.partition("/")
            if not (namespace and slash and name) or "/" in name:
                raise ValueError(f"kubernetes_agent_service_accounts: {entry!r} is not NAMESPACE/NAME")
        if self.kubernetes_agent_auth and not self.kubernetes_agent_service_accounts:
            raise ValueError("kubernetes_agent_service_accounts: name the agents' ServiceAccounts (NAMESPACE/NAME)")
        return self

    @model_validator(mode="after")
    def _sample_age_within_retention(self) -> ServerSettings:
        window_s = self.raw_retention_hours * 3600
        if self.ingest_max_sample_age_seconds is not None and self.ingest_max_sample_age_seconds > window_s:
            raise ValueError(
                f"ingest_max_sample_age_seconds: {self.ingest_max_sample_age_seconds:g} s is longer than the raw "
                f"retention window (raw_retention_hours {self.raw_retention_hours:g} = {window_s:g} s)"
            )
        return self

    @property
    def ingest_sample_age_limit_seconds(self) -> float:
        """How far back an agent's sample is stored: ``ingest_max_sample_age_seconds``, else the raw retention less
        10 minutes. A late sample's minute is re-rolled at the next rollup run (60 s); at the window's very edge
        retention (every 300 s) could delete that minute's other samples first, and the re-roll keep only the late
        one: 24 h − 10 min leaves both runs room (half a window shorter than 20 minutes)."""
        if self.ingest_max_sample_age_seconds is not None:
            return self.ingest_max_sample_age_seconds
        return max(self.raw_retention_hours * 3600 - 600, self.raw_retention_hours * 1800)

    @model_validator(mode="after")
    def _keda_tls(self) -> ServerSettings:
        names = ("keda_tls_cert_file", "keda_tls_key_file", "keda_tls_client_ca_file")
        missing = [name for name in names if getattr(self, name) is None]
        if 0 < len(missing) < len(names):
            raise ValueError(f"{', '.join(missing)}: name all three of {', '.join(names)}, or none")
        exposed = self.keda_port is not None and not _is_loopback(self.host)
        if missing and exposed and self.environment is not Environment.DEVELOPMENT:
            raise ValueError(
                f"keda_port: off loopback, production serves KEDA's scaler only over TLS (host {self.host!r}): set "
                f"{', '.join(names)}"
            )
        return self

    @property
    def secure_cookies(self) -> bool:
        """The dashboard cookies' ``Secure``: ``cookie_secure`` when set, else on everywhere but in development."""
        if self.cookie_secure is not None:
            return self.cookie_secure
        return self.environment is not Environment.DEVELOPMENT

    @property
    def external_url(self) -> str:
        """Where alert payloads link back to: ``alert_external_url``, else this server's address."""
        return self.alert_external_url or f"http://{self.host}:{self.port}"

    @model_validator(mode="after")
    def _refuse_insecure(self) -> ServerSettings:
        for name in ("admin_token", "session_secret", "scrape_token"):
            problem = weak_secret_problem(getattr(self, name))
            if problem is not None:
                raise ValueError(f"{name}: {problem}")
        # parsed again where they are used (web.client_address, alerting.target_address); here a typo stops the start
        for name in ("trusted_proxies", "webhook_allowed_networks"):
            for entry in getattr(self, name):
                try:
                    ipaddress.ip_network(entry.strip(), strict=False)
                except ValueError:
                    raise ValueError(f"{name}: {entry!r} is no address or CIDR") from None
        if self.environment is Environment.PRODUCTION and self.database_url == DEFAULT_DATABASE_URL:
            raise ValueError(
                "production needs an explicit FLEETPILOT_DATABASE_URL (the default is a file in the working directory)"
            )
        return self

    @property
    def forecast_stale_after_seconds(self) -> float:
        """A stored forecast older than three forecast intervals is stale: that many runs have failed or not run."""
        return 3 * self.forecast_interval_seconds

    @property
    def worker_processes(self) -> int:
        """``workers`` when set; else one per core on PostgreSQL, and 1 on SQLite: its single writer serialises
        every commit, so a second process adds a second queue at the same lock, not throughput."""
        if self.workers is not None:
            return self.workers
        return 1 if self.database_url.startswith("sqlite") else os.cpu_count() or 1

    def sqlite_path(self) -> Path | None:
        """The database file when the URL is SQLite on disk, so the server can create its folder."""
        prefix = "sqlite:///"
        if not self.database_url.startswith(prefix) or self.database_url.endswith(":memory:"):
            return None
        return Path(self.database_url.removeprefix(prefix))

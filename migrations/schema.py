"""Every table of the product, gathered on one MetaData for Alembic (each import registers its tables)."""

from alerting import tables as _alerting  # noqa: F401  (alert_rules, alerts, silences, webhooks, outbox, deliveries)
from autoscaler import failover as _failover  # noqa: F401  (failovers)
from collector.remote import tables as _remote  # noqa: F401  (remote_series, remote_points)
from collector.tables import metadata
from fleet import lease as _lease  # noqa: F401  (leases)
from fleet import pools as _pools  # noqa: F401  (pools)
from fleet import scaling_log as _scaling_log  # noqa: F401  (scaling_events)
from fleet.desired import board as _board  # noqa: F401  (desired_snapshots)
from fleet.desired import pools as _placements  # noqa: F401  (placements, retired_pools)
from isolation import events as _enforcement  # noqa: F401  (enforcement_events, throttle_levels)
from isolation import tenants as _tenants  # noqa: F401  (tenants, tenant_quotas)
from predictor import accuracy_store as _forecast_scores  # noqa: F401  (forecast_scores)
from predictor import store as _forecast_store  # noqa: F401  (forecasts)
from web import tables as _web_tables  # noqa: F401  (api_tokens, dashboard_sessions, audit_log)

target_metadata = metadata

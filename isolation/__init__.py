"""Tenant isolation: tenants, their SLO classes and per-pool quotas, checked so that what is promised can hold."""

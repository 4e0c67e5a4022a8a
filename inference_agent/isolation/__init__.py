"""The node side of tenant isolation: per-tenant usage each replica reports, and applying limits to replicas."""

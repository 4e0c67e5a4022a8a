"""The operator dashboard: server-rendered pages over the same stores the REST API reads, with a session login."""

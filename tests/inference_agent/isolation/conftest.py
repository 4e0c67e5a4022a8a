"""The serving tests' in-process replicas, reused for the per-tenant usage they report."""

from tests.inference_agent.serving.conftest import start_replica  # noqa: F401 - a fixture, found by name

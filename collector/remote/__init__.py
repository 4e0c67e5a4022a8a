"""What reaches the collector from other telemetry systems: Prometheus remote write and OTLP."""

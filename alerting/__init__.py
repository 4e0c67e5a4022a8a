"""Alerting: rules, their pure evaluation, the alert lifecycle, silences and signed webhook delivery (CONTRACT 10)."""

"""Grafana: the dashboards as code (one builder per row), their panels and JSON, the Grafana-managed alerts."""

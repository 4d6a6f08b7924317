"""Monitoring bundle: Grafana dashboards, Prometheus rules and Grafana alert provisioning as code.

`render_bundle(selectors)` returns every generated file as {relative path: text}; the committed
`dashboards/`, `alerts/` and `docs/metrics.md` are its output with no selectors. grafanalib (the
optional `bundle` extra) is imported only by the modules that need it, and only when called.
"""

from __future__ import annotations

from kvoffload_exporter.bundle.render import render_bundle

__all__ = ["render_bundle"]

"""`render_bundle()`: every generated file of the bundle, as {relative path: text}, for given selectors.

Later generators (Kubernetes, compose) add their files here; the CLI and the drift tests need no change.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from kvoffload_exporter.bundle.alerting.promql import parse_selectors
from kvoffload_exporter.bundle.settings import DEFAULT, Settings

RULES_PATH = "alerts/kvoffload.rules.yaml"
METRICS_DOC_PATH = "docs/metrics.md"


def render_bundle(
    selectors: Iterable[str] | Mapping[str, str] | None = None, settings: Settings = DEFAULT
) -> dict[str, str]:
    """Render the bundle. `selectors`: `["job=vllm-sidecar", ...]` or `{"job": "vllm-sidecar"}`.

    Raises ImportError when grafanalib (the `bundle` extra) is missing, ValueError on a bad selector."""
    from kvoffload_exporter.bundle import ruletests
    from kvoffload_exporter.bundle.alerting import rulefile
    from kvoffload_exporter.bundle.alerting.rules import build
    from kvoffload_exporter.bundle.deployment import jsonnet_mixin, shards
    from kvoffload_exporter.bundle.deployment.deploy import render_deploy
    from kvoffload_exporter.bundle.grafana import dashboards, grafana_alerts
    from kvoffload_exporter.bundle.texts import alerts_doc, metrics_doc, runbook

    matchers = parse_selectors(selectors)
    files: dict[str, str] = {
        RULES_PATH: rulefile.prometheus_rules_yaml(settings, matchers),
        METRICS_DOC_PATH: metrics_doc.render(),
        metrics_doc.RENAMES_PATH: metrics_doc.renames_json(),
        runbook.PATH: runbook.render(settings),
        alerts_doc.PATH: alerts_doc.render(settings),
    }
    files.update(ruletests.render(settings, matchers, build(settings, matchers)[1]))
    files.update(dashboards.render(matchers))
    files.update(grafana_alerts.render(settings, matchers))
    files.update(render_deploy(files, settings))
    files.update(shards.render())
    files[jsonnet_mixin.PATH] = jsonnet_mixin.render(files, settings, matchers)
    return dict(sorted(files.items()))

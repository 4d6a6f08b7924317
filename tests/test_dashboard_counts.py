"""The dashboard's event-count tiles agree with their alerts: a counter first scraped above zero (a mismatch the
canary confirmed before Prometheus's first scrape, which ends its run) shows what it counted, not a green 0, and
a counter that counted nothing shows 0. Evaluated by promtool (Prometheus's own PromQL) on the shipped JSON."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from support.boards import panels

from kvoffload_exporter.bundle.alerting.promql import template_free

PROMTOOL = shutil.which("promtool")
pytestmark = pytest.mark.skipif(PROMTOOL is None, reason="promtool not installed")
DASHBOARD = Path(__file__).resolve().parents[1] / "dashboards" / "kvoffload-overview.json"
BASE = 'job="kvoffload",instance="sidecar:9466"'


def _expr(title: str) -> str:
    (panel,) = [p for p in panels(json.loads(DASHBOARD.read_text())) if p.get("title") == title]
    return template_free(panel["targets"][0]["expr"], {"__range": "1h"})


CASES = {
    "Canary output mismatches": (
        "kvoffload_canary_output_mismatches_total",
        ',pair="offload_vs_recompute"',
        "",
        [("kvoffload_canary_output_sensitive", "1x30")],
    ),
    "Integrity events": (
        "kvoffload_integrity_events_total",
        ',model_name="m",engine="0",kind="nan_logits"',
        ',kind="nan_logits"',
        [],
    ),
}


@pytest.mark.parametrize("title", sorted(CASES))
def test_a_counter_first_scraped_above_zero_shows_its_count(title: str, tmp_path: Path) -> None:
    metric, own, kept, extra = CASES[title]
    series = [
        {"series": f'{metric}{{{BASE},target="born-at-2"{own}}}', "values": "2x30"},
        {"series": f'{metric}{{{BASE},target="healthy"{own}}}', "values": "0x30"},
    ]
    for name, values in extra:
        series += [{"series": f'{name}{{{BASE},target="{t}"}}', "values": values} for t in ("born-at-2", "healthy")]
    want = [{"labels": f'{{{BASE},target="{t}"{kept}}}', "value": v} for t, v in (("born-at-2", 2), ("healthy", 0))]
    doc = {
        "rule_files": [],
        "evaluation_interval": "1m",
        "tests": [
            {
                "interval": "1m",
                "input_series": series,
                "promql_expr_test": [{"expr": _expr(title), "eval_time": "10m", "exp_samples": want}],
            }
        ],
    }
    path = tmp_path / "counts.test.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    assert PROMTOOL is not None
    run = subprocess.run([PROMTOOL, "test", "rules", str(path)], capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stdout + run.stderr

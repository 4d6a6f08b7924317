"""`docs/alerts.md`: every alert setting (`bundle --set` key), its kind, value and meaning, and the presets.

Generated from kvoffload_exporter/bundle/settings.py so the list of keys can never lag behind what `--set` accepts;
the "value" column is that of the render (the committed file shows the defaults).
"""

from __future__ import annotations

from kvoffload_exporter.bundle.alerting.rules import build
from kvoffload_exporter.bundle.settings import DEFAULT, FIELDS, PRESETS, Settings, doc_of, kind_of

PATH = "docs/alerts.md"


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _value(v: object) -> str:
    return f"{v:.15g}" if isinstance(v, float) else str(v)


def render(s: Settings = DEFAULT) -> str:
    alerts = build(s)[1]
    out = [
        "# Alerts",
        "",
        "<!-- Generated from kvoffload_exporter/bundle/settings.py by `kvoffload-exporter bundle`; do not edit. -->",
        "",
        "`kvoffload-exporter bundle --out DIR` writes the Prometheus rules (`alerts/kvoffload.rules.yaml`),",
        "their Grafana-managed copy (`alerts/grafana/`), the runbook every alert links to",
        "(`alerts/runbook.md`), the dashboards and the Kubernetes/compose files generated from them.",
        "",
        "```bash",
        "kvoffload-exporter bundle --out DIR \\",
        "  --selector job=vllm-kvoffload \\",
        "  --runbook-url https://git.example.com/ops/kvoffload/blob/main/alerts/runbook.md \\",
        "  --set reuse_window=2h --set store_without_load_min_bytes=5e9",
        "```",
        "",
        "- `--selector LABEL=VALUE` (also `!=`, `=~`, `!~`; repeatable, one matcher each) is added to every",
        '  selector of every rule and panel. `job=` is refused: write `job=""` to match a missing label.',
        "  Regexes must compile (RE2: no look-around, no back-references).",
        "- `--runbook-url URL` points each alert's `runbook_url` at your copy (`URL#<alert name in lower case>`);",
        "  without it the rules link to the runbook the project publishes (always an absolute URL: a",
        "  relative one cannot be opened from a notification).",
        "- `--set KEY=VALUE` overrides one setting (table below; repeatable); `--preset NAME` applies a named",
        "  list of `--set`s first, so `--set` after it wins. Annotation texts and the runbook follow the",
        "  chosen windows. An unknown key or a bad value fails with one line and exit 2, nothing written.",
        "  A duration takes the grammar of every command: a Prometheus duration (`30s`, `5m`, `1h30m`) or plain",
        "  seconds (`reuse_window=2` is `2s`); the rules get it in Prometheus's form.",
        "- Beside the rules, `alerts/tests/rendered-<alert>.test.yaml` holds a firing and a silent promtool",
        "  case per alert for the rules as rendered (same settings and selectors):",
        "  `promtool test rules DIR/alerts/tests/*.yaml`. A case the rendered rules cannot make fire (a",
        "  selector on a label the alert's series never carry) is left out and named in the file's header.",
        "- jsonnet users import `mixin.libsonnet` (monitoring-mixin layout: `prometheusAlerts`,",
        "  `prometheusRules`, `grafanaDashboards`) and override `_config`: `selector` (PromQL matchers, e.g.",
        "  `'job=\"vllm\"'`), `runbookURLPattern` (an absolute URL with `%s` for the alert name in lower case)",
        "  and `thresholds` (every setting below, by key). Rendered by the same code as the YAML, so a",
        "  `_config` gives the rules `bundle` renders with the same `--selector`, `--set` and `--runbook-url`.",
        "",
        f"Alerts: {', '.join(f'`{a.alert}`' for a in alerts)}.",
        "",
        "## Settings",
        "",
        "| Key | Kind | Value | Meaning |",
        "|---|---|---|---|",
    ]
    for key in FIELDS:
        out.append(f"| `{key}` | {kind_of(key)} | `{_cell(_value(getattr(s, key)))}` | {_cell(doc_of(key))} |")
    out += ["", "## Presets", ""]
    for name, sets in PRESETS.items():
        out += [
            f"### `{name}`",
            "",
            "A staging rehearsal: each alert can fire within minutes of its fault. Keep Prometheus' scrape",
            "interval at 15 s or less (each window then holds at least 4 scrapes). The Prometheus end-to-end",
            "test (tests/test_prometheus_e2e.py) runs exactly these rules. Equivalent `--set`s:",
            "",
            "```bash",
            f"kvoffload-exporter bundle --out staging --preset {name}",
            "kvoffload-exporter bundle --out staging \\",
            " \\\n".join(f"  --set {k}={v}" for k, v in sets.items()),
            "```",
            "",
        ]
    return "\n".join(out).rstrip("\n") + "\n"

"""`docs/metrics.md`: the metric catalogue as a Markdown reference (generated; a test keeps it current)."""

from __future__ import annotations

import json
from collections.abc import Sequence

from kvoffload_exporter.catalogue import (
    CANARY_ERROR_REASONS,
    CANARY_PATHS,
    CANARY_REASONS,
    CANARY_RESULTS,
    CANARY_TIERS,
    CANARY_VERDICTS,
    CATALOGUE,
    COLLECTORS,
    HTTP_REJECT_REASONS,
    MEMORY_SOURCES,
    PROBE_EVICTIONS,
    PROCESS_ROLES,
    RECOMMENDATIONS,
    SCRAPE_ERROR_REASONS,
    STATE_REASONS,
    STATES,
    Group,
)
from kvoffload_exporter.catalogue.renames import NAMING_RULE, RENAMES

RENAMES_PATH = "docs/renames-0.1.0.json"

GROUPS: dict[Group, str] = {
    Group.HEALTH: "Exporter and target health",
    Group.ENGINE: "Offload traffic and engine signals (cumulative, per engine)",
    Group.DERIVED: "Windowed derivations (over the exporter's `--state.window`)",
    Group.MEMORY: "Host and GPU memory",
    Group.CANARY: "Canary",
}

_CLOSED_SETS: tuple[tuple[str, Sequence[str]], ...] = (
    ("`state`", STATES),
    ("`reason` (state reasons)", STATE_REASONS),
    ("`reason` (scrape errors)", SCRAPE_ERROR_REASONS),
    ("`reason` (exporter listener)", HTTP_REJECT_REASONS),
    ("`reason` (probe evictions)", PROBE_EVICTIONS),
    ("`collector`", COLLECTORS),
    ("`role`", PROCESS_ROLES),
    ("`source` (process tree memory)", MEMORY_SOURCES),
    ("`path`", CANARY_PATHS),
    ("`result`", CANARY_RESULTS),
    ("`reason` (canary cycles)", CANARY_REASONS),
    ("`reason` (canary errors)", CANARY_ERROR_REASONS),
    ("`verdict`", CANARY_VERDICTS),
    ("`tier`", CANARY_TIERS),
    ("`recommendation`", RECOMMENDATIONS),
)
"""Label values the exporter writes from a closed set (the enums in kvoffload_exporter/enums.py, canary/types.py)."""


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def render() -> str:
    out = [
        "# Metrics",
        "",
        "<!-- Generated from kvoffload_exporter/catalogue/ by `kvoffload-exporter bundle`; do not edit. -->",
        "",
        "Every series the exporter serves on `/metrics`. Prometheus adds `job` and `instance`. Names follow",
        "Prometheus conventions: `kvoffload_` prefix, base units, `_total` only on counters, ratios 0-1.",
        "State sets and info metrics are exposed as gauges (1 for the current state / always 1).",
        "",
        "Naming (every name below follows it):",
        "",
        *(f"- {rule}" for rule in NAMING_RULE),
        "",
        "Closed label value sets:",
        "",
    ]
    for label, values in _CLOSED_SETS:
        out.append(f"- {label}: " + ", ".join(f"`{v}`" for v in values))
    for group, title in GROUPS.items():
        metrics = [m for m in CATALOGUE.values() if m.group == group]
        if not metrics:
            continue
        out += ["", f"## {title}", "", "| Name | Type | Unit | Labels | Help | Source |", "|---|---|---|---|---|---|"]
        for m in metrics:
            labels = ", ".join(f"`{lb}`" for lb in m.labels) or "–"
            source = f"`{_cell(m.source)}`" if m.source else "–"
            out.append(f"| `{m.name}` | {m.type} | {m.unit or '–'} | {labels} | {_cell(m.help)} | {source} |")
    out += ["", "## Renamed before 0.1.0", "", f"Also in `{RENAMES_PATH}`. `{{unit}}`: the old `unit` label's value."]
    out += ["", "| Old name | New name |", "|---|---|", *(f"| `{o}` | `{n}` |" for o, n in RENAMES.items())]
    unknown = sorted({m.group for m in CATALOGUE.values()} - set(GROUPS))
    if unknown:  # a new catalogue group must get a section title here
        raise ValueError(f"catalogue groups without a docs section: {unknown}")
    return "\n".join(out) + "\n"


def renames_json() -> str:
    """`docs/renames-0.1.0.json`: {old: new}, to rewrite queries, dashboards or another branch mechanically."""
    return json.dumps(RENAMES, sort_keys=True, indent=2, ensure_ascii=False) + "\n"

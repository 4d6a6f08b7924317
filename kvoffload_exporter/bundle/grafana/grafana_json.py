"""Post-processing of grafanalib 0.7.1 output into dashboard JSON that current Grafana loads cleanly.

grafanalib emits schemaVersion 12, Graph-era threshold steps (the base step as the string "null"),
gauge reducer options under `fieldConfig` (ignored by Grafana, grafanalib#575) and many legacy keys.
These pure functions rewrite its `to_json_data()` output; nothing here imports grafanalib.
"""

from __future__ import annotations

import json
from typing import Any

SCHEMA_VERSION = 39
DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}

_DASHBOARD_DROP = ("__inputs", "rows", "style", "sharedCrosshair", "hideControls", "gnetId")
_PANEL_DROP = (
    "span",
    "minSpan",
    "height",
    "error",
    "cacheTimeout",
    "hideTimeOverride",
    "repeat",
    "repeatDirection",
    "maxPerRow",
    "timeFrom",
    "timeShift",
    "interval",
    "thresholds",
    "thresholdType",
    "editable",
)
_TARGET_KEEP = ("expr", "format", "hide", "legendFormat", "refId", "instant", "interval")
_VARIABLE_DROP = ("useTags", "tagsQuery", "tagValuesQuery", "auto", "auto_min", "auto_count", "tags")


def _strip_none(obj: Any) -> Any:
    """Drop None values recursively: grafanalib writes `null` for every unset option."""
    if isinstance(obj, dict):
        return {k: _strip_none(v) for k, v in obj.items() if v is not None}
    if isinstance(obj, list):
        return [_strip_none(v) for v in obj]
    return obj


# Any: a Grafana JSON fragment that modernise merges into panels
def threshold_steps(steps: list[tuple[str, float | None]]) -> dict[str, Any]:
    """Absolute threshold steps in the shape Grafana ≥ 8 reads: the base step has value null."""
    return {
        "mode": "absolute",
        "steps": [{"color": c, "value": (None if i == 0 else v)} for i, (c, v) in enumerate(steps)],
    }


# Any: grafanalib's target JSON, read and rewritten key by key
def _fix_target(t: dict[str, Any]) -> dict[str, Any]:
    out = {k: t[k] for k in _TARGET_KEEP if k in t and t[k] not in ("", None)}
    out["datasource"] = dict(DATASOURCE)
    out["editorMode"] = "code"
    out["range"] = not out.get("instant", False)
    out.setdefault("instant", False)
    out.setdefault("hide", False)
    return out


# Any: grafanalib's panel JSON, read and rewritten nested
def _fix_panel(p: dict[str, Any], steps: dict[int, list[tuple[str, float | None]]]) -> dict[str, Any]:
    for k in _PANEL_DROP:
        p.pop(k, None)
    if p.get("type") == "row":
        p.pop("datasource", None)
        p.pop("targets", None)
        p.pop("fieldConfig", None)
        p.pop("options", None)
        p.pop("transformations", None)
        p.pop("maxDataPoints", None)
        p.pop("description", None)
        p.pop("links", None)
        p.pop("transparent", None)  # not a row property (grafanalib leftover)
        p.setdefault("collapsed", False)
        p["panels"] = []
        return p
    p["datasource"] = dict(DATASOURCE)
    p["targets"] = [_fix_target(t) for t in p.get("targets", [])]
    p.pop("maxDataPoints", None)  # let Grafana size queries to the panel width
    fc = p.setdefault("fieldConfig", {"defaults": {}, "overrides": []})
    fc.setdefault("overrides", [])
    d = fc.setdefault("defaults", {})
    d["thresholds"] = threshold_steps(steps.get(p["id"], [("green", None)]))
    if p.get("type") == "gauge":
        # grafanalib puts the reducer under fieldConfig, where Grafana ignores it (grafanalib#575).
        opts = p.setdefault("options", {})
        opts["reduceOptions"] = {
            "calcs": d.pop("calcs", ["lastNotNull"]),
            "fields": "",
            "values": bool(d.pop("values", False)),
        }
        limit = d.pop("limit", None)
        if limit:
            opts["reduceOptions"]["limit"] = limit
        opts["showThresholdLabels"] = fc.pop("showThresholdLabels", False)
        opts["showThresholdMarkers"] = fc.pop("showThresholdMarkers", True)
        opts.setdefault("orientation", "auto")
        # Grafana's gauge defaults, written out: its panel schema lists them as required.
        opts.setdefault("sizing", "auto")
        opts.setdefault("minVizWidth", 75)
        opts.setdefault("minVizHeight", 75)
        d.pop("override", None)
        d.pop("title", None)
        d.pop("links", None)
    if p.get("type") == "stat":
        d.pop("custom", None)
        if not d.get("color"):
            d["color"] = {"mode": "thresholds"}
        opts = p.setdefault("options", {})
        opts.setdefault("wideLayout", True)
        opts.setdefault("showPercentChange", False)
        opts.setdefault("percentChangeColorMode", "standard")  # Grafana's default (11.x+; ignored before)
    if p.get("type") == "timeseries":
        p["options"]["legend"]["showLegend"] = p["options"]["legend"].get("displayMode") != "hidden"
    if p.get("type") == "state-timeline":
        p["options"]["legend"]["showLegend"] = True
    if p.get("type") in ("timeseries", "state-timeline"):
        # Grafana's defaults for the legend and tooltip options its panel schemas require.
        p["options"]["legend"].setdefault("calcs", [])
        p["options"].setdefault("tooltip", {"mode": "single"}).setdefault("sort", "none")
    if not p.get("transformations"):
        p.pop("transformations", None)
    if not p.get("links"):
        p.pop("links", None)
    return p


# Any: grafanalib's template variable JSON, read and rewritten
def _fix_variable(v: dict[str, Any]) -> dict[str, Any]:
    for k in _VARIABLE_DROP:
        v.pop(k, None)
    # No `current`: Grafana then selects the default option; `{}` is not a valid VariableOption (text, value).
    v.pop("current", None)
    if v.get("type") == "datasource":
        v.pop("datasource", None)
        v["options"] = []
        v["query"] = "prometheus"
        v["regex"] = ""
        return v
    q = v.get("query", "")
    v["datasource"] = dict(DATASOURCE)
    v["definition"] = q
    v["query"] = {"query": q, "refId": "PrometheusVariableQueryEditor-VariableQuery"}
    v["options"] = []
    v.setdefault("regex", "")
    return v


# Any: grafanalib's dashboard JSON in, current Grafana's out
def modernise(dashboard: dict[str, Any], steps: dict[int, list[tuple[str, float | None]]]) -> dict[str, Any]:
    """grafanalib dashboard JSON (already plain dicts) → current-Grafana dashboard JSON.

    `steps` maps panel id → threshold steps [(color, value)], first value ignored (base step)."""
    # Any: the dashboard JSON as json.loads gives it
    d: dict[str, Any] = _strip_none(json.loads(json.dumps(dashboard)))
    for k in _DASHBOARD_DROP:
        d.pop(k, None)
    d["schemaVersion"] = SCHEMA_VERSION
    d["id"] = None  # provisioned dashboards must not carry a database id
    d.setdefault("links", [])
    d["panels"] = [_fix_panel(p, steps) for p in d.get("panels", [])]
    d["templating"] = {"list": [_fix_variable(v) for v in d.get("templating", {}).get("list", [])]}
    tp = d.get("timepicker", {})
    tp.pop("time_options", None)
    tp.pop("hidden", None)
    tp.pop("nowDelay", None)
    d["timepicker"] = tp
    d["annotations"] = {
        "list": [
            {
                "builtIn": 1,
                "datasource": {"type": "grafana", "uid": "-- Grafana --"},
                "enable": True,
                "hide": True,
                "iconColor": "rgba(0, 211, 255, 1)",
                "name": "Annotations & Alerts",
                "type": "dashboard",
            }
        ]
    }
    d["fiscalYearStartMonth"] = 0
    d["liveNow"] = False
    d["weekStart"] = ""
    return d


def dumps(obj: Any) -> str:
    """Deterministic JSON: sorted keys, 2-space indent, trailing newline."""
    return json.dumps(obj, sort_keys=True, indent=2, ensure_ascii=False) + "\n"

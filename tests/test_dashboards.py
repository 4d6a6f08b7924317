"""Dashboards: committed JSON is current, valid against Grafana's schemas, and every query is sound.

Two schema checks, both kept because they cover different ground:

* tests/fixtures/grafana/dashboard.schema.json is hand-written (see its description). It pins what the
  official schema does not: schemaVersion >= 39, no grafanalib legacy keys anywhere, the project's panel kinds.
  ALLOWED_SCHEMA_VIOLATIONS is its allow-list (currently none).
* tests/fixtures/grafana/foundation-sdk/ holds Grafana's dashboard (v1), panel-kind and Prometheus dataquery
  JSON schemas, vendored unchanged from grafana/grafana-foundation-sdk (README.md there says from where).
  Every committed dashboard is validated against the dashboard schema, every panel's `options` and
  `fieldConfig.defaults.custom` against its panel kind's `Options`/`FieldConfig`, every target against the
  Prometheus `Dataquery`. These schemas are stricter than Grafana in places; FOUNDATION_SDK_ALLOWED lists
  each accepted deviation, and a test fails on an entry that no longer matches a real violation.
"""

from __future__ import annotations

import copy
import json
import os
import re
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import pytest

pytest.importorskip("grafanalib")
jsonschema = pytest.importorskip("jsonschema")

from kvoffload_exporter.bundle import render_bundle
from kvoffload_exporter.bundle.alerting.promql import names_in, parse_selectors
from kvoffload_exporter.bundle.grafana import dashboards
from kvoffload_exporter.bundle.grafana.grafana_json import SCHEMA_VERSION
from kvoffload_exporter.bundle.grafana.panels import RATIO_UNIT, UNBOUNDED_RATIOS
from kvoffload_exporter.catalogue import CATALOGUE
from kvoffload_exporter.cli import main

ROOT = Path(__file__).resolve().parents[1]
RENDER_AS_JSON = (
    "import json, sys; from kvoffload_exporter.bundle import render_bundle; json.dump(render_bundle(), sys.stdout)"
)
SCHEMA = json.loads((ROOT / "tests/fixtures/grafana/dashboard.schema.json").read_text())

ALLOWED_SCHEMA_VIOLATIONS: dict[str, str] = {
    # "json/path/regex": "why Grafana accepts it although the schema does not model it",
}

FOUNDATION_SDK = ROOT / "tests/fixtures/grafana/foundation-sdk"
# Grafana panel plugin id -> vendored foundation-sdk schema file (jsonschema/<name>.jsonschema.json).
PANEL_KINDS = {"timeseries": "timeseries", "stat": "stat", "gauge": "gauge", "state-timeline": "statetimeline"}

# Accepted deviations from the foundation-sdk schemas: (schema file, JSON path regex, schema keyword, why).
# A violation is allowed only when the schema, the full path and the failing keyword all match. Only cases where
# the SDK's generated JSON schema is stricter than Grafana belong here; real problems are fixed in
# kvoffload_exporter/bundle/grafana/grafana_json.py instead.
FOUNDATION_SDK_ALLOWED: list[tuple[str, str, str, str]] = [
    (
        "dashboard",
        r"panels/\d+/fieldConfig/overrides/\d+/matcher/options",
        "type",
        # Grafana's MatcherConfig has `options?: _` (any; the SDK's own Go type is `any` too), and the
        # byFrameRefID/byName matchers take a plain string: Grafana itself saves {"id": "byFrameRefID",
        # "options": "B"}. The SDK's JSON schema narrows `options` to an object.
        "MatcherConfig.options is `any` in Grafana; byFrameRefID takes a refId string",
    ),
    (
        "dashboard",
        r"templating/list/\d+",
        "additionalProperties",
        # Grafana's AdHocVariableModel carries `filters` (the filters currently applied; [] in a saved
        # dashboard). The SDK folds every variable kind into one VariableModel without that key.
        "AdHocVariableModel.filters exists in Grafana; the SDK's merged VariableModel lacks it",
    ),
    (
        "dashboard",
        r"templating/list/\d+/query/(query|refId)",
        "type",
        # Grafana's VariableModel has `query?: string | {...}` (any object). The SDK renders the object branch
        # as a map whose values must be objects, but the Prometheus variable editor saves
        # {"query": "label_values(...)", "refId": "PrometheusVariableQueryEditor-VariableQuery"} (strings).
        "VariableModel.query object is {...} in Grafana; the Prometheus editor stores string values",
    ),
]

LEGACY_KEYS = {
    "rows",
    "style",
    "sharedCrosshair",
    "hideControls",
    "__inputs",
    "span",
    "minSpan",
    "height",
    "useTags",
    "tagsQuery",
    "tagValuesQuery",
    "intervalFactor",
    "step",
    "metric",
    "query_ref",
}


@pytest.fixture(scope="module")
def rendered() -> dict[str, dict]:
    return {name: fn(()) for name, fn in dashboards.DASHBOARDS.items()}


def _viz(d: dict) -> list[dict]:
    return [p for p in d["panels"] if p["type"] != "row"]


def _fsdk_validator(schema_file: str, definition: str):
    """A draft-07 validator for one definition of a vendored (unchanged) foundation-sdk schema file."""
    schema = json.loads((FOUNDATION_SDK / f"{schema_file}.jsonschema.json").read_text())
    return jsonschema.Draft7Validator({**schema, "$ref": f"#/definitions/{definition}"})


def _leaves(error) -> list:
    """The concrete failures behind an error. For oneOf/anyOf (panel vs row, string vs object) follow the
    branch that got furthest into the instance (deepest failing path, then fewest failures)."""
    if not error.context:
        return [error]
    branches: dict = defaultdict(list)
    for sub in error.context:
        branches[sub.relative_schema_path[0]].extend(_leaves(sub))
    return max(branches.values(), key=lambda errs: (max(len(e.absolute_path) for e in errs), -len(errs)))


def _fsdk_violations(d: dict) -> list[tuple[str, str, str, str]]:
    """(schema file, JSON path in the dashboard, keyword, message) for every foundation-sdk violation."""
    out = []

    def check(schema_file: str, definition: str, instance, prefix: str) -> None:
        for e in _fsdk_validator(schema_file, definition).iter_errors(instance):
            for leaf in _leaves(e):
                path = "/".join([prefix, *map(str, leaf.absolute_path)]).strip("/")
                out.append((schema_file, path, leaf.validator, leaf.message[:200]))

    check("dashboard", "Dashboard", d, "")
    for i, p in enumerate(d["panels"]):
        if p["type"] == "row":
            continue  # RowPanel is part of the dashboard schema
        kind = PANEL_KINDS.get(p["type"])
        if kind is None:
            out.append(("-", f"panels/{i}/type", "vendor", f"no vendored schema for panel type {p['type']!r}"))
            continue
        check(kind, "Options", p.get("options", {}), f"panels/{i}/options")
        custom = p.get("fieldConfig", {}).get("defaults", {}).get("custom")
        if "FieldConfig" in json.loads((FOUNDATION_SDK / f"{kind}.jsonschema.json").read_text())["definitions"]:
            check(kind, "FieldConfig", custom or {}, f"panels/{i}/fieldConfig/defaults/custom")
        elif custom:
            out.append(
                (
                    kind,
                    f"panels/{i}/fieldConfig/defaults/custom",
                    "FieldConfig",
                    f"{p['type']} has no custom field config",
                )
            )
        for j, t in enumerate(p.get("targets", [])):
            check("prometheus", "Dataquery", t, f"panels/{i}/targets/{j}")
    return out


def _allowed(v: tuple[str, str, str, str], entry: tuple[str, str, str, str]) -> bool:
    return v[0] == entry[0] and re.fullmatch(entry[1], v[1]) is not None and v[2] == entry[2]


def _committed() -> dict[str, dict]:
    return {p.name: json.loads(p.read_text()) for p in sorted((ROOT / "dashboards").glob("*.json"))}


def _walk_keys(obj, path=""):
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield k, f"{path}/{k}"
            yield from _walk_keys(v, f"{path}/{k}")
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            yield from _walk_keys(v, f"{path}/{i}")


def test_output_is_deterministic_sorted_json():
    # Two fresh interpreters with different hash seeds (set and dict iteration order differ between
    # them) must render byte-identical files, and the same as this process.
    a = render_bundle()
    for seed in ("1", "2"):
        out = subprocess.run(
            [sys.executable, "-c", RENDER_AS_JSON],
            capture_output=True,
            text=True,
            check=True,
            cwd=ROOT,
            env={**os.environ, "PYTHONHASHSEED": seed},
        ).stdout
        assert json.loads(out) == a, f"PYTHONHASHSEED={seed}"
    for path, text in a.items():
        if path.endswith(".json"):
            assert text.endswith("}\n")
            assert text == json.dumps(json.loads(text), sort_keys=True, indent=2, ensure_ascii=False) + "\n"


@pytest.mark.parametrize("name", sorted(dashboards.DASHBOARDS))
def test_valid_against_vendored_grafana_schema(rendered, name):
    validator = jsonschema.Draft202012Validator(SCHEMA)
    errors = []
    for e in validator.iter_errors(rendered[name]):
        path = "/".join(map(str, e.absolute_path))
        if not any(re.fullmatch(rx, path) for rx in ALLOWED_SCHEMA_VIOLATIONS):
            errors.append(f"{path}: {e.message[:200]}")
    assert not errors, "\n".join(errors)


def test_committed_dashboards_are_the_generated_set():
    assert set(_committed()) == set(dashboards.DASHBOARDS)


@pytest.mark.parametrize("name", sorted(dashboards.DASHBOARDS))
def test_valid_against_grafana_foundation_sdk_schemas(name):
    """The committed file, as Grafana will read it: dashboard, each panel's options/custom, each target."""
    bad = [
        v
        for v in _fsdk_violations(_committed()[name])
        if not any(_allowed(v, entry) for entry in FOUNDATION_SDK_ALLOWED)
    ]
    assert not bad, "\n".join(f"{s}: {path} [{kw}] {msg}" for s, path, kw, msg in bad)


def test_foundation_sdk_allow_list_has_no_stale_entries():
    violations = [v for d in _committed().values() for v in _fsdk_violations(d)]
    stale = [entry for entry in FOUNDATION_SDK_ALLOWED if not any(_allowed(v, entry) for v in violations)]
    assert not stale, f"allow-list entries that match no violation any more: {stale}"
    for entry in FOUNDATION_SDK_ALLOWED:
        assert (FOUNDATION_SDK / f"{entry[0]}.jsonschema.json").exists() and entry[3].strip(), entry


def test_foundation_sdk_panel_kinds_cover_the_dashboards(rendered):
    used = {p["type"] for d in rendered.values() for p in d["panels"]} - {"row"}
    assert used <= set(PANEL_KINDS), used - set(PANEL_KINDS)
    assert {p.name for p in FOUNDATION_SDK.glob("*.jsonschema.json")} == {
        f"{k}.jsonschema.json" for k in {"dashboard", "prometheus", *PANEL_KINDS.values()}
    }


def _break(d: dict, what: str) -> str:
    """Re-introduce one problem the post-processing fixes; return the (schema, path) that must be reported."""
    panels = d["panels"]
    idx = {
        t: next(i for i, p in enumerate(panels) if p["type"] == t)
        for t in ("row", "stat", "gauge", "timeseries", "state-timeline")
    }
    if what == "row-transparent":
        panels[idx["row"]]["transparent"] = False
        return f"dashboard panels/{idx['row']}"
    if what == "empty-current":
        d["templating"]["list"][0]["current"] = {}
        return "dashboard templating/list/0/current"
    if what == "stat-option":
        del panels[idx["stat"]]["options"]["percentChangeColorMode"]
        return f"stat panels/{idx['stat']}/options"
    if what == "gauge-option":
        del panels[idx["gauge"]]["options"]["sizing"]
        return f"gauge panels/{idx['gauge']}/options"
    if what == "legend":
        del panels[idx["timeseries"]]["options"]["legend"]["showLegend"]
        return f"timeseries panels/{idx['timeseries']}/options/legend"
    if what == "tooltip":
        del panels[idx["state-timeline"]]["options"]["tooltip"]["sort"]
        return f"statetimeline panels/{idx['state-timeline']}/options/tooltip"
    if what == "custom":
        panels[idx["timeseries"]]["fieldConfig"]["defaults"]["custom"]["drawStyle"] = "graph"
        return f"timeseries panels/{idx['timeseries']}/fieldConfig/defaults/custom/drawStyle"
    if what == "target":
        panels[idx["timeseries"]]["targets"][0]["intervalFactor"] = "2"
        return f"prometheus panels/{idx['timeseries']}/targets/0/intervalFactor"
    raise AssertionError(what)


@pytest.mark.parametrize(
    "what", ["row-transparent", "empty-current", "stat-option", "gauge-option", "legend", "tooltip", "custom", "target"]
)
def test_foundation_sdk_check_has_teeth(what):
    d = copy.deepcopy(_committed()["kvoffload-overview.json"])
    expected = _break(d, what)
    found = {f"{s} {path}" for s, path, _, _ in _fsdk_violations(d)}
    assert expected in found, sorted(found)


def _raw_grafanalib_dashboard() -> dict[str, object]:
    """One gauge panel as grafanalib writes it, without the bundle's modernising pass."""
    import grafanalib.core as G
    from grafanalib._gen import DashboardEncoder

    raw = G.Dashboard(
        title="t",
        uid="u",
        panels=[
            G.GaugePanel(
                title="g",
                description="d",
                targets=[G.Target(expr="kvoffload_up", refId="A")],
                gridPos=G.GridPos(h=4, w=4, x=0, y=0),
                id=1,
            )
        ],
    ).to_json_data()
    out: dict[str, object] = json.loads(json.dumps(raw, cls=DashboardEncoder))
    return out


def test_foundation_sdk_rejects_raw_grafanalib_output():
    raw = _raw_grafanalib_dashboard()
    bad = [v for v in _fsdk_violations(raw) if not any(_allowed(v, e) for e in FOUNDATION_SDK_ALLOWED)]
    messages = " ".join(v[3] for v in bad)
    for legacy in ("sharedCrosshair", "rows", "__inputs"):
        assert legacy in messages
    assert any(v[0] == "prometheus" for v in bad) and any(v[0] == "gauge" for v in bad)


def test_schema_rejects_raw_grafanalib_output():
    """The schema has teeth: grafanalib's own output (schemaVersion 12, "null" threshold strings,
    gauge reducer under fieldConfig, legacy keys) is rejected."""
    raw = _raw_grafanalib_dashboard()
    messages = " ".join(e.message for e in jsonschema.Draft202012Validator(SCHEMA).iter_errors(raw))
    assert "12 is less than the minimum of 39" in messages
    assert "'null' is not of type 'null'" in messages
    for legacy in ("sharedCrosshair", "rows", "__inputs"):
        assert legacy in messages


def test_current_grafana_shape(rendered):
    for d in rendered.values():
        assert d["schemaVersion"] == SCHEMA_VERSION >= 39
        assert d["id"] is None
        bad = sorted({p for k, p in _walk_keys(d) if k in LEGACY_KEYS})
        assert not bad, bad
        for p in _viz(d):
            steps = p["fieldConfig"]["defaults"]["thresholds"]["steps"]
            assert steps[0]["value"] is None and all(isinstance(s["value"], (int, float)) for s in steps[1:])
            assert not {"op", "yaxis", "line", "index"} & {k for s in steps for k in s}
            if p["type"] in ("gauge", "stat"):
                assert p["options"]["reduceOptions"]["calcs"] == ["lastNotNull"], p["title"]
                assert "calcs" not in p["fieldConfig"]["defaults"]
            for t in p["targets"]:
                assert t["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
                assert not {"query", "target", "step", "intervalFactor"} & set(t)


def test_stable_uids_titles_and_layout(rendered):
    assert rendered["kvoffload-overview.json"]["uid"] == "kvoffload-overview"
    assert rendered["kvoffload-exporter-health.json"]["uid"] == "kvoffload-exporter-health"
    for d in rendered.values():
        ids = [p["id"] for p in d["panels"]]
        assert len(ids) == len(set(ids))
        cells: set[tuple[int, int]] = set()
        for p in d["panels"]:
            g = p["gridPos"]
            assert g["x"] + g["w"] <= 24
            mine = {(x, y) for x in range(g["x"], g["x"] + g["w"]) for y in range(g["y"], g["y"] + g["h"])}
            assert not mine & cells, f"{p['title']} overlaps another panel"
            cells |= mine


def test_every_panel_has_unit_description_and_queries(rendered):
    for d in rendered.values():
        for p in _viz(d):
            assert p["description"].strip(), p["title"]
            assert p["fieldConfig"]["defaults"]["unit"], p["title"]
            assert p["targets"] and all(t["expr"] for t in p["targets"]), p["title"]


def test_panel_units_match_the_catalogue(rendered):
    """A panel of gauges in one catalogue unit shows that unit; rate() of a bytes counter shows Bps."""
    checked = 0
    for d in rendered.values():
        for p in _viz(d):
            units = set()
            if any(" / " in t["expr"] for t in p["targets"]):
                continue  # a quotient of two same-unit metrics is a ratio
            for t in p["targets"]:
                for name in names_in(t["expr"]):
                    if name == "kvoffload_up" and "and on (job, instance)" in t["expr"]:
                        continue  # the per-exporter filter, not what is plotted
                    m = CATALOGUE[name]
                    per_second = f"rate({name}" in t["expr"]
                    units.add((m.unit, per_second))
            if len(units) != 1:
                continue
            unit, per_second = units.pop()
            plotted = {n for t in p["targets"] for n in names_in(t["expr"])}
            if plotted & set(UNBOUNDED_RATIOS):
                checked += 1
                assert p["fieldConfig"]["defaults"]["unit"] == RATIO_UNIT, p["title"]
                continue
            expected = {
                ("bytes", True): "Bps",
                ("bytes", False): "bytes",
                ("seconds", False): "s",
                ("ratio", False): "percentunit",
                ("bytes_per_second", False): "Bps",
                ("tokens", False): "suffix: tokens",
                ("tokens", True): "suffix: tokens/s",
            }.get((unit, per_second))
            if expected:
                checked += 1
                assert p["fieldConfig"]["defaults"]["unit"] == expected, p["title"]
    assert checked >= 12


REPLICA_VARS = ["job", "namespace", "pod", "instance"]


def test_template_variables(rendered):
    ov = {v["name"]: v for v in rendered["kvoffload-overview.json"]["templating"]["list"]}
    assert list(ov) == ["datasource", *REPLICA_VARS, "target", "model", "engine", "filters"]
    assert ov["datasource"]["type"] == "datasource" and ov["datasource"]["query"] == "prometheus"
    for name in (*REPLICA_VARS, "target", "model", "engine"):
        assert ov[name]["includeAll"] and ov[name]["multi"] and ov[name]["allValue"] == ".*"
        assert ov[name]["query"]["query"] == ov[name]["definition"]
    health = [v["name"] for v in rendered["kvoffload-exporter-health.json"]["templating"]["list"]]
    assert health == ["datasource", *REPLICA_VARS, "target", "filters"]


def test_replica_variables_chain_and_ad_hoc_filter(rendered):
    """job → namespace → pod → instance → target: each list is limited by the choices before it."""
    for d in rendered.values():
        by_name = {v["name"]: v for v in d["templating"]["list"]}
        before: list[str] = []
        for name in (*REPLICA_VARS, "target"):
            definition = by_name[name]["definition"]
            assert definition.startswith("label_values(kvoffload_up") and definition.endswith(f", {name})")
            for prev in before:
                assert f'{prev}=~"${prev}"' in definition, (name, definition)
            before.append(name)
        adhoc = by_name["filters"]
        assert adhoc["type"] == "adhoc" and adhoc["datasource"] == {"type": "prometheus", "uid": "${datasource}"}


def test_every_query_filters_by_the_replica_variables_and_every_legend_names_the_instance(rendered):
    checked = 0
    for d in rendered.values():
        for p in _viz(d):
            for t in p["targets"]:
                assert "{{instance}}" in t["legendFormat"], (p["title"], t["legendFormat"])
                for name, sel in re.findall(r"(kvoffload_\w+)(\{[^}]*\})?", t["expr"]):
                    for var in REPLICA_VARS:
                        assert f'{var}=~"${var}"' in sel, (p["title"], name, var)
                    checked += 1
                for by in re.findall(r"(?:sum|max|min|avg) by \(([^)]*)\)", t["expr"]):
                    assert {"job", "instance"} <= {x.strip() for x in by.split(",")}, (p["title"], by)
    assert checked > 45


def _plotted_metrics(p: dict) -> set[str]:
    return {n for t in p["targets"] for n in names_in(t["expr"].split(" and on (job, instance) ")[0])}


def test_ratio_panels_start_at_zero_and_the_load_store_ratio_is_not_a_percentage(rendered):
    ratio_panels = 0
    for d in rendered.values():
        for p in _viz(d):
            names = _plotted_metrics(p)
            defaults = p["fieldConfig"]["defaults"]
            if names and all(CATALOGUE[n].unit == "ratio" for n in names):
                ratio_panels += 1
                assert defaults["min"] == 0, p["title"]
                if names & set(UNBOUNDED_RATIOS):
                    assert defaults["unit"] != "percentunit" and "max" not in defaults, p["title"]
                else:
                    assert defaults["unit"] == "percentunit" and defaults["max"] == 1, p["title"]
    assert ratio_panels >= 3
    (lsr,) = [p for p in _viz(rendered["kvoffload-overview.json"]) if p["title"] == "Load/store ratio"]
    assert lsr["fieldConfig"]["defaults"]["unit"] == "none"  # 8.1 reads 8.1, not 810 %


def test_descriptions_name_the_metrics_and_say_which_panels_need_the_canary(rendered):
    canary_panels = 0
    for d in rendered.values():
        for p in _viz(d):
            names = _plotted_metrics(p)
            assert names, p["title"]
            for n in names:
                assert f"`{n}`" in p["description"], (p["title"], n)
            canary = any(CATALOGUE[n].group == "canary" for n in names)
            no_value = p["fieldConfig"]["defaults"]["noValue"]
            assert no_value.strip()
            if canary:
                canary_panels += 1
                assert "serve --canary.enabled" in p["description"] and "serve --canary.enabled" in no_value, p["title"]
            else:
                assert "--canary" not in p["description"] + no_value, p["title"]
    assert canary_panels >= 7


def test_queries_use_catalogue_names_and_filter_by_variables(rendered):
    for d in rendered.values():
        for p in _viz(d):
            for t in p["targets"]:
                names = names_in(t["expr"])
                assert names, t["expr"]
                assert names <= set(CATALOGUE), names - set(CATALOGUE)
                for sel in re.findall(r"(kvoffload_\w+)(\{[^}]*\})?", t["expr"]):
                    labels = CATALOGUE[sel[0]].labels
                    if "target" in labels:
                        assert 'target=~"$target"' in sel[1], (p["title"], sel)
                    if "engine" in labels and d["uid"] == "kvoffload-overview":
                        assert 'engine=~"$engine"' in sel[1] and 'model_name=~"$model"' in sel[1]


def test_overview_covers_the_issue_panels(rendered):
    titles = " | ".join(p["title"] for p in rendered["kvoffload-overview.json"]["panels"])
    for needle in (
        "state per engine",
        "Load/store ratio",
        "bandwidth",
        "GPU vs external",
        "TTFT quantiles",
        "Canary TTFT per path",
        "ΔTTFT",
        "verdict",
        "headroom vs configured tier",
        "VRAM",
    ):
        assert needle in titles, needle
    health = " | ".join(p["title"] for p in rendered["kvoffload-exporter-health.json"]["panels"])
    for needle in ("target up", "Collector success", "Collector duration", "Poll errors", "budget"):
        assert needle in health, needle


def test_selectors_reach_every_selector_and_variable():
    files = render_bundle(["job=vllm-sidecar", 'namespace=~"llm-.*"'])
    checked = 0
    for path in ("dashboards/kvoffload-overview.json", "dashboards/kvoffload-exporter-health.json"):
        d = json.loads(files[path])
        exprs = [t["expr"] for p in _viz(d) for t in p["targets"]]
        exprs += [v["definition"] for v in d["templating"]["list"] if v["type"] == "query"]
        for e in exprs:
            for name, sel in re.findall(r"(kvoffload_\w+)(\{[^}]*\})?", e):
                assert sel.startswith('{job="vllm-sidecar",namespace=~"llm-.*"'), (name, e)
                checked += 1
    assert checked > 45


def test_bad_selectors_are_rejected():
    for bad in ("job", "=x", "__name__=x", "job=a job=b"):
        with pytest.raises(ValueError):
            parse_selectors([bad] if bad != "job=a job=b" else ["job=a", "job=b"])


def test_metrics_doc_lists_every_catalogue_metric():
    doc = render_bundle()["docs/metrics.md"]
    for m in CATALOGUE.values():
        assert f"| `{m.name}` | {m.type} |" in doc


def test_cli_bundle_writes_and_checks(tmp_path, capsys):
    assert main(["bundle", "--out", str(tmp_path), "--selector", "job=vllm-sidecar"]) == 0
    d = json.loads((tmp_path / "dashboards/kvoffload-overview.json").read_text())
    assert 'job="vllm-sidecar"' in d["panels"][1]["targets"][0]["expr"]
    assert 'job="vllm-sidecar"' in (tmp_path / "alerts/kvoffload.rules.yaml").read_text()
    assert main(["bundle", "--out", str(tmp_path), "--selector", "job=vllm-sidecar", "--check"]) == 0
    (tmp_path / "dashboards/kvoffload-overview.json").write_text("{}\n")
    assert main(["bundle", "--out", str(tmp_path), "--selector", "job=vllm-sidecar", "--check"]) == 1
    assert "stale: dashboards/kvoffload-overview.json" in capsys.readouterr().err
    assert main(["bundle", "--out", str(tmp_path), "--selector", "oops"]) == 2

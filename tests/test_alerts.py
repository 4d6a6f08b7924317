"""Alert rules: committed YAML is current, promtool checks and unit tests pass (and can fail), the rule
metadata is complete, and the Grafana-managed copy has the file-provisioning shape Grafana loads."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

pytest.importorskip("grafanalib")

from exporter.bundle import render_bundle
from exporter.bundle.grafana_alerts import EXEC_ERR_STATES, NO_DATA_STATES
from exporter.bundle.promql import names_in, parse_selectors
from exporter.bundle.rules import (
    build,
    dump_yaml,
    prometheus_rules,
    prometheus_rules_yaml,
)
from exporter.bundle.settings import DEFAULT
from exporter.catalogue import CATALOGUE

ROOT = Path(__file__).resolve().parents[1]
RULES = ROOT / "alerts/kvoffload.rules.yaml"
PROMTOOL_TESTS = ROOT / "alerts/tests/kvoffload.test.yaml"
RUNBOOK = ROOT / "alerts/runbook.md"
GRAFANA_RULES = "alerts/grafana/kvoffload-alert-rules.yaml"
PROMTOOL = shutil.which("promtool")
needs_promtool = pytest.mark.skipif(PROMTOOL is None, reason="promtool not installed (apt-get install prometheus)")

REQUIRED_ALERTS = {
    "KVOffloadStoreWithoutLoad",
    "KVOffloadSlowerThanRecompute",
    "KVOffloadTTFTRegression",
    "KVOffloadMetricsAbsent",
    "KVOffloadExporterTargetDown",
    "KVOffloadHostMemoryHeadroomLow",
    "KVOffloadAllocationFailures",
    "KVOffloadCanaryFailing",
}


def _promtool(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    assert PROMTOOL
    return subprocess.run([PROMTOOL, *args], capture_output=True, text=True, timeout=120, cwd=cwd, check=False)


def _alerts(doc: dict) -> list[dict]:
    return [r for g in doc["groups"] for r in g["rules"] if "alert" in r]


def test_every_alert_is_complete():
    doc = yaml.safe_load(RULES.read_text())
    alerts = _alerts(doc)
    assert {a["alert"] for a in alerts} >= REQUIRED_ALERTS
    anchors = {
        re.sub(r"[^a-z0-9-]", "", h.lower()) for h in re.findall(r"^## (.+)$", RUNBOOK.read_text(), re.MULTILINE)
    }
    for a in alerts:
        assert re.fullmatch(r"\d+[smhd]", a["for"]), a
        assert a["labels"]["severity"] in ("warning", "critical")
        ann = a["annotations"]
        assert ann["summary"] and "{{" not in ann["summary"], "summary must be static"
        assert "{{ $labels." in ann["description"], "description must be templated"
        assert ann["runbook_url"] == f"{DEFAULT.runbook_url}#{a['alert'].lower()}"
        assert a["alert"].lower() in anchors, f"alerts/runbook.md has no section {a['alert']}"


def test_every_name_comes_from_the_catalogue_or_a_recording_rule():
    doc = yaml.safe_load(RULES.read_text())
    recorded = {r["record"] for g in doc["groups"] for r in g["rules"] if "record" in r}
    assert recorded and all(r.count(":") == 2 for r in recorded)
    for g in doc["groups"]:
        for r in g["rules"]:
            names = names_in(r["expr"])
            assert names, r
            unknown = {n for n in names if n not in CATALOGUE and n not in recorded}
            assert not unknown, (r.get("alert") or r.get("record"), unknown)


def test_counters_are_only_read_through_increase_or_rate():
    """A raw counter in an alert would fire on an exporter or engine restart (counter reset)."""
    _, alerts = build(inline=True)
    counters = [n for n, m in CATALOGUE.items() if m.type == "counter"]
    for a in alerts:
        for c in counters:
            for m in re.finditer(rf"{c}\b", a.expr):
                before = a.expr[: m.start()]
                assert re.search(r"(increase|rate)\($", before), (a.alert, c)


def test_selectors_are_injected_everywhere():
    doc = prometheus_rules(DEFAULT, parse_selectors(["job=vllm-sidecar"]))
    n = 0
    for g in doc["groups"]:
        for r in g["rules"]:
            for name, sel in re.findall(r"(?<![\w:])(kvoffload_\w+)(\{[^}]*\})?", r["expr"]):
                if name in CATALOGUE:
                    assert sel.startswith('{job="vllm-sidecar"'), (r, name)
                    n += 1
    assert n >= 20


@needs_promtool
def test_promtool_check_rules_default_and_with_selectors(tmp_path):
    assert _promtool("check", "rules", str(RULES)).returncode == 0
    custom = tmp_path / "custom.rules.yaml"
    custom.write_text(prometheus_rules_yaml(DEFAULT, parse_selectors(["job=vllm-sidecar", 'ns=~"a|b"'])))
    res = _promtool("check", "rules", str(custom))
    assert res.returncode == 0, res.stdout + res.stderr


@needs_promtool
def test_promtool_unit_tests_pass():
    res = _promtool("test", "rules", str(PROMTOOL_TESTS))
    assert res.returncode == 0, res.stdout + res.stderr
    assert "SUCCESS" in res.stdout


def test_promtool_tests_name_a_positive_and_a_negative_case_per_alert():
    tests = yaml.safe_load(PROMTOOL_TESTS.read_text())["tests"]
    alerts = {a["alert"] for a in _alerts(yaml.safe_load(RULES.read_text()))}
    fires: set[str] = set()
    silent: set[str] = set()
    for t in tests:
        assert t["name"].strip()
        for case in t["alert_rule_test"]:
            (fires if case["exp_alerts"] else silent).add(case["alertname"])
    assert alerts <= fires, alerts - fires
    assert alerts <= silent, alerts - silent
    names = " ".join(t["name"] for t in tests)
    for replay in ("vllm#47890", "+27.7 ms", "-546.5 ms", "upgrade", "Exporter restart"):
        assert replay in names, replay


def _run_tests_against(tmp_path: Path, rules_text: str, only: str = "") -> subprocess.CompletedProcess[str]:
    """Run the committed promtool cases (those whose name contains `only`) against other rules."""
    (tmp_path / "kvoffload.rules.yaml").write_text(rules_text)
    tests = tmp_path / "tests"
    tests.mkdir(exist_ok=True)
    doc = yaml.safe_load(PROMTOOL_TESTS.read_text())
    doc["tests"] = [t for t in doc["tests"] if only in t["name"]]
    assert doc["tests"]
    (tests / "kvoffload.test.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))
    return _promtool("test", "rules", "tests/kvoffload.test.yaml", cwd=tmp_path)


@needs_promtool
def test_promtool_tests_catch_a_broken_rule(tmp_path):
    """Mutation check: StoreWithoutLoad without its `unless loads` clause must fail the healthy case."""
    doc = prometheus_rules()
    for r in _alerts(doc):
        if r["alert"] == "KVOffloadStoreWithoutLoad":
            r["expr"] = re.sub(r"\nunless [^\n]*", "", r["expr"])
    assert _run_tests_against(tmp_path, prometheus_rules_yaml(), "KVOffloadStoreWithoutLoad").returncode == 0
    res = _run_tests_against(tmp_path, dump_yaml(doc), "KVOffloadStoreWithoutLoad")
    assert res.returncode != 0
    assert "healthy tier" in res.stdout + res.stderr


@needs_promtool
def test_grafana_inlined_expressions_behave_like_the_prometheus_rules(tmp_path):
    """The Grafana copy inlines the recording rules: run the same promtool cases against it."""
    _, alerts = build(inline=True)
    doc = {
        "groups": [
            {
                "name": "inlined",
                "rules": [
                    {
                        "alert": a.alert,
                        "expr": a.expr,
                        "for": a.for_,
                        "labels": {"severity": a.severity},
                        "annotations": {
                            "summary": a.summary,
                            "description": a.description,
                            "runbook_url": a.runbook_url(DEFAULT.runbook_url),
                        },
                    }
                    for a in alerts
                ],
            }
        ]
    }
    res = _run_tests_against(tmp_path, dump_yaml(doc))
    assert res.returncode == 0, res.stdout + res.stderr


def test_grafana_provisioning_shape():
    doc = yaml.safe_load(render_bundle()[GRAFANA_RULES])
    prom = {a["alert"]: a for a in _alerts(yaml.safe_load(RULES.read_text()))}
    assert doc["apiVersion"] == 1
    (group,) = doc["groups"]
    assert group["orgId"] == 1 and group["name"] and group["folder"] and re.fullmatch(r"\d+[sm]", group["interval"])
    uids = set()
    for r in group["rules"]:
        assert set(r) >= {
            "uid",
            "title",
            "condition",
            "data",
            "noDataState",
            "execErrState",
            "for",
            "labels",
            "annotations",
        }
        assert "grafana_alert" not in r
        assert r["title"] in prom
        assert re.fullmatch(r"[a-z0-9-]{1,40}", r["uid"]) and r["uid"] not in uids
        uids.add(r["uid"])
        assert r["noDataState"] in NO_DATA_STATES and r["execErrState"] in EXEC_ERR_STATES
        assert r["for"] == prom[r["title"]]["for"]
        assert r["labels"] == prom[r["title"]]["labels"]
        assert r["annotations"]["runbook_url"] == prom[r["title"]]["annotations"]["runbook_url"]
        assert "$value " not in r["annotations"]["description"] and "$value |" not in r["annotations"]["description"]
        refs = {d["refId"]: d for d in r["data"]}
        assert r["condition"] in refs
        query = refs["A"]
        assert query["datasourceUid"] == DEFAULT.grafana_datasource_uid
        assert query["relativeTimeRange"]["from"] > 0
        assert ":" not in "".join(names_in(query["model"]["expr"])), "recording rules must be inlined"
        for ref, d in refs.items():
            if ref != "A":
                assert d["datasourceUid"] == "__expr__"
                assert d["model"]["datasource"] == {"type": "__expr__", "uid": "__expr__"}
                assert d["model"]["type"] in ("reduce", "math", "threshold", "classic_conditions")
    assert {r["title"] for r in group["rules"]} == set(prom)


def test_grafana_contact_point_and_policy_examples_agree():
    files = render_bundle()
    cps = yaml.safe_load(files["alerts/grafana/contact-points.example.yaml"])
    pol = yaml.safe_load(files["alerts/grafana/notification-policies.example.yaml"])
    names = {c["name"] for c in cps["contactPoints"]}
    assert cps["apiVersion"] == 1 and pol["apiVersion"] == 1
    for p in pol["policies"]:
        assert p["receiver"] in names
        assert all(r["receiver"] in names for r in p.get("routes", []))
    for c in cps["contactPoints"]:
        assert all(r["uid"] and r["type"] for r in c["receivers"])

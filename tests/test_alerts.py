"""Alert rules: committed YAML is current, promtool checks and unit tests pass (and can fail), the rule
metadata is complete, and the Grafana-managed copy has the file-provisioning shape Grafana loads."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

pytest.importorskip("grafanalib")

from kvoffload_exporter.bundle import render_bundle
from kvoffload_exporter.bundle.alerting.promql import names_in, parse_selectors
from kvoffload_exporter.bundle.alerting.rulefile import dump_yaml, prometheus_rules, prometheus_rules_yaml
from kvoffload_exporter.bundle.alerting.rules import build
from kvoffload_exporter.bundle.grafana.grafana_alerts import EXEC_ERR_STATES, NO_DATA_STATES
from kvoffload_exporter.bundle.settings import DEFAULT, FIELDS, PRESETS, Kind, kind_of
from kvoffload_exporter.catalogue import CATALOGUE
from kvoffload_exporter.cli import main

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
            # The alerts on the monitoring itself read only Prometheus's own `up` of the exporter's jobs.
            assert names or re.search(r"\bup\{[^}]*job=~\"" + re.escape(DEFAULT.exporter_jobs), r["expr"]), r
            unknown = {n for n in names if n not in CATALOGUE and n not in recorded}
            assert not unknown, (r.get("alert") or r.get("record"), unknown)


def test_counters_are_only_read_through_increase_or_rate():
    """A raw counter in an alert would fire on an exporter or engine restart (counter reset). The one raw read
    allowed is a series first seen above zero (`x > 0 unless present_over_time(x[w] offset w)`): a reset reads 0."""
    _, alerts = build(inline=True)
    counters = [n for n, m in CATALOGUE.items() if m.type == "counter"]
    for a in alerts:
        for c in counters:
            for m in re.finditer(rf"{c}\b", a.expr):
                before, after = a.expr[: m.start()], a.expr[m.end() :]
                first_seen = re.match(rf"(\{{[^}}]*\}})? > 0 unless present_over_time\({c}\b", after)
                assert re.search(r"(increase|rate|present_over_time)\($", before) or first_seen, (a.alert, c)


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
        for case in t.get("alert_rule_test", []):  # a recording rule's case has promql_expr_test only
            (fires if case["exp_alerts"] else silent).add(case["alertname"])
    assert alerts <= fires, alerts - fires
    assert alerts <= silent, alerts - silent
    names = " ".join(t["name"] for t in tests)
    for replay in ("vllm#47890", "+27.7 ms", "-546.5 ms", "upgrade", "Exporter restart"):
        assert replay in names, replay


def _run_tests_against(
    tmp_path: Path, rules_text: str, only: str = "", recorded: bool = True
) -> subprocess.CompletedProcess[str]:
    """Run the committed promtool cases (those whose name contains `only`; without `recorded`, only the alert
    cases: the Grafana copy has no recording rules) against other rules."""
    (tmp_path / "kvoffload.rules.yaml").write_text(rules_text)
    tests = tmp_path / "tests"
    tests.mkdir(exist_ok=True)
    doc = yaml.safe_load(PROMTOOL_TESTS.read_text())
    doc["tests"] = [t for t in doc["tests"] if only in t["name"] and (recorded or "alert_rule_test" in t)]
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
    doc = {"groups": [{"name": "inlined", "rules": [a.prometheus_rule(DEFAULT.runbook_url) for a in alerts]}]}
    res = _run_tests_against(tmp_path, dump_yaml(doc), recorded=False)
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


# --------------------------------------------------------------------------------------------------
# bundle: runbook, selectors, --set and presets
# --------------------------------------------------------------------------------------------------


def _anchors(markdown: str) -> set[str]:
    return {re.sub(r"[^a-z0-9-]", "", h.lower()) for h in re.findall(r"^## (.+)$", markdown, re.MULTILINE)}


def test_bundle_out_writes_the_runbook_every_alert_links_to(tmp_path):
    url = "https://runbooks.example.com/kvoffload/runbook.md"
    assert main(["bundle", "--out", str(tmp_path), "--runbook-url", url + "/"]) == 0
    runbook = (tmp_path / "alerts/runbook.md").read_text()
    anchors = _anchors(runbook)
    alerts = _alerts(yaml.safe_load((tmp_path / "alerts/kvoffload.rules.yaml").read_text()))
    grafana = yaml.safe_load((tmp_path / GRAFANA_RULES).read_text())["groups"][0]["rules"]
    assert len(alerts) == len(grafana) >= len(REQUIRED_ALERTS)
    for ann in [a["annotations"] for a in alerts] + [r["annotations"] for r in grafana]:
        base, _, anchor = ann["runbook_url"].partition("#")
        assert base == url and anchor in anchors, ann["runbook_url"]
    assert _anchors(runbook) == {a["alert"].lower() for a in alerts}
    assert (ROOT / "alerts/runbook.md").read_text() == render_bundle()["alerts/runbook.md"]


def test_runbook_url_is_documented_as_the_way_to_make_links_clickable(capsys):
    with pytest.raises(SystemExit):
        main(["bundle", "--help"])
    assert "clickable" in " ".join(capsys.readouterr().out.split())
    doc = (ROOT / "docs/alerts.md").read_text()
    assert "--runbook-url" in doc and "link" in doc


@pytest.mark.parametrize(
    "bad",
    [
        "job=~[",  # promtool would reject the rule file later
        "job=x,env=y",  # used to become job="x,env=y"
        'job="x",env="y"',
        "job=x env=y",
        "job=",  # empty: only job="" means "label missing"
        "job=~",
        "ns=~a(?=b)",  # no look-ahead in RE2
        "__name__=x",
    ],
)
def test_bad_selector_is_one_line_and_exit_2_with_nothing_written(tmp_path, capsys, bad):
    assert main(["bundle", "--out", str(tmp_path / "out"), "--selector", bad]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("kvoffload-exporter bundle: ") and "Traceback" not in err
    assert not (tmp_path / "out").exists()


def test_explicit_empty_selector_value_is_kept():
    (m,) = parse_selectors(['job=""'])
    assert str(m) == 'job=""'
    assert str(parse_selectors(['ns=~"a,b"'])[0]) == 'ns=~"a,b"'  # one regex with a comma is one matcher


def _valid_other_value(key: str) -> str:
    """A value different from the default, valid for the key's kind."""
    kind = kind_of(key)
    if kind is Kind.NUMBER:
        return f"{float(getattr(DEFAULT, key)) * 2 + 3:g}"
    return {Kind.DURATION: "17m", Kind.QUANTILE: "0.99", Kind.REGEX: "cold|recompute", Kind.TEXT: "custom-text"}[kind]


@pytest.mark.parametrize("key", list(FIELDS))
def test_set_accepts_every_setting_and_the_rendered_rules_use_it(tmp_path, key):
    value = _valid_other_value(key)
    assert main(["bundle", "--out", str(tmp_path), "--set", f"{key}={value}"]) == 0
    rules = (tmp_path / "alerts/kvoffload.rules.yaml").read_text()
    grafana = (tmp_path / GRAFANA_RULES).read_text()
    docs = (tmp_path / "docs/alerts.md").read_text()
    shown = f"{float(value):.15g}" if kind_of(key) is Kind.NUMBER else value.replace("|", "\\|")
    assert f"| `{key}` |" in docs and f"`{shown}`" in docs, "docs/alerts.md shows the rendered value"
    if key in ("grafana_datasource_uid", "grafana_folder", "grafana_interval"):
        assert value in grafana
    else:
        assert value in rules or f"{float(value):.15g}" in rules, f"{key}={value} changed nothing"


@pytest.mark.parametrize(
    "bad",
    [
        "reuse_window=5parsecs",
        "reuse_window=",
        "nope=1m",
        "store_without_load_min_bytes=lots",
        "ttft_quantile=0.95",
        "slower_controls=[",
        "headroom_min_tier_ratio=-1",
        "reuse_window",
    ],
)
def test_bad_set_is_one_line_and_exit_2(tmp_path, capsys, bad):
    assert main(["bundle", "--out", str(tmp_path / "out"), "--set", bad]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert not (tmp_path / "out").exists()


def test_annotation_texts_and_runbook_follow_the_chosen_windows(tmp_path):
    """No window or `for` is hard-coded: with every duration changed, no default one is left in any text."""
    durations = [k for k in FIELDS if kind_of(k) is Kind.DURATION and k != "grafana_interval"]
    new = {k: f"{i + 41}m" for i, k in enumerate(durations)}
    args = ["bundle", "--out", str(tmp_path)]
    for k, v in new.items():
        args += ["--set", f"{k}={v}"]
    assert main(args) == 0
    texts = [
        " ".join([a["annotations"]["summary"], a["annotations"]["description"]])
        for a in _alerts(yaml.safe_load((tmp_path / "alerts/kvoffload.rules.yaml").read_text()))
    ]
    runbook = (tmp_path / "alerts/runbook.md").read_text()
    old = {getattr(DEFAULT, k) for k in durations}
    for text in [*texts, runbook.split("\n## ", 1)[1]]:
        left = {d for d in old if re.search(rf"(?<![\w.]){d}\b", text)}
        assert not left, (left, text[:300])
    for word in ("hour", "minutes", "yesterday", " day "):
        assert word not in " ".join(texts), word
    assert "41m" in " ".join(texts) and "41m" in runbook  # reuse_window, the first one
    assert "Rendered with:" in runbook


def test_docs_alerts_lists_every_setting_and_preset():
    doc = (ROOT / "docs/alerts.md").read_text()
    assert doc == render_bundle()["docs/alerts.md"]
    for key in FIELDS:
        assert f"| `{key}` |" in doc, key
    for name, sets in PRESETS.items():
        assert f"--preset {name}" in doc
        for k, v in sets.items():
            assert f"--set {k}={v}" in doc


@needs_promtool
def test_rehearsal_preset_and_set_order(tmp_path):
    """The preset renders valid rules with minute-scale windows; a --set after it wins."""
    assert main(["bundle", "--out", str(tmp_path), "--preset", "rehearsal", "--set", "target_down_for=45s"]) == 0
    rules = tmp_path / "alerts/kvoffload.rules.yaml"
    res = _promtool("check", "rules", str(rules))
    assert res.returncode == 0, res.stdout + res.stderr
    doc = {a["alert"]: a for a in _alerts(yaml.safe_load(rules.read_text()))}
    assert doc["KVOffloadExporterTargetDown"]["for"] == "45s"
    assert doc["KVOffloadStoreWithoutLoad"]["for"] == PRESETS["rehearsal"]["store_without_load_for"]
    assert all(re.fullmatch(r"\d+[sm]", a["for"]) for a in doc.values())


def test_jsonnet_mixin_exposes_the_same_rules_and_dashboards(tmp_path):
    """mixin.libsonnet (monitoring-mixin layout) imports the rendered files: evaluated, it is them."""
    jsonnet = pytest.importorskip("_jsonnet")
    assert (ROOT / "mixin.libsonnet").read_text() == render_bundle()["mixin.libsonnet"]
    assert main(["bundle", "--out", str(tmp_path), "--selector", "job=vllm-kvoffload"]) == 0
    snippet = (
        "local m = import 'mixin.libsonnet';"
        "{alerts: m.prometheusAlerts, records: m.prometheusRules, dashboards: m.grafanaDashboards}"
    )
    (tmp_path / "eval.jsonnet").write_text(snippet)  # imports resolve next to it: the rendered mixin
    out = json.loads(jsonnet.evaluate_file(str(tmp_path / "eval.jsonnet")))
    rules = yaml.safe_load((tmp_path / "alerts/kvoffload.rules.yaml").read_text())
    assert out["records"]["groups"] + out["alerts"]["groups"] == rules["groups"]
    assert all("alert" in r for g in out["alerts"]["groups"] for r in g["rules"])
    assert 'job="vllm-kvoffload"' in out["records"]["groups"][0]["rules"][0]["expr"]
    dashboards = {p.name: json.loads(p.read_text()) for p in (tmp_path / "dashboards").glob("*.json")}
    assert out["dashboards"] == dashboards and len(dashboards) == 2


def test_jsonnet_mixin_config_overrides_equal_a_bundle_rendered_with_the_same_settings(tmp_path):
    """`_config` (selector, thresholds, runbookURLPattern) in jsonnet gives the rules the YAML bundle renders for
    the same `--selector`, `--set` and `--runbook-url`: one definition, two front ends."""
    jsonnet = pytest.importorskip("_jsonnet")
    assert main(["bundle", "--out", str(tmp_path / "default")]) == 0
    snippet = (
        "local m = (import 'mixin.libsonnet') + { _config+:: {"
        " selector: 'job=\"vllm-x\"', runbookURLPattern: 'https://runbooks.example/kv.md#%s',"
        " thresholds+: { slower_for: '1h', store_without_load_min_bytes: 5e9, headroom_min_tier_ratio: 0.25,"
        " ttft_regression_min_seconds: 0.1, reuse_window: '2h' } } };"
        "{alerts: m.prometheusAlerts, records: m.prometheusRules}"
    )
    (tmp_path / "default" / "eval.jsonnet").write_text(snippet)
    out = json.loads(jsonnet.evaluate_file(str(tmp_path / "default" / "eval.jsonnet")))
    argv = ["bundle", "--out", str(tmp_path / "set"), "--selector", "job=vllm-x"]
    argv += ["--runbook-url", "https://runbooks.example/kv.md", "--set", "slower_for=1h"]
    argv += ["--set", "store_without_load_min_bytes=5e9", "--set", "headroom_min_tier_ratio=0.25"]
    argv += ["--set", "ttft_regression_min_seconds=0.1", "--set", "reuse_window=2h"]
    assert main(argv) == 0
    rules = yaml.safe_load((tmp_path / "set" / "alerts/kvoffload.rules.yaml").read_text())
    assert out["records"]["groups"] + out["alerts"]["groups"] == rules["groups"]
    slower = next(
        r for g in out["alerts"]["groups"] for r in g["rules"] if r["alert"] == "KVOffloadSlowerThanRecompute"
    )
    assert slower["for"] == "1h" and slower["annotations"]["runbook_url"].startswith("https://runbooks.example/kv.md#")


def test_every_runbook_url_is_absolute_in_the_rules_the_grafana_copy_and_the_mixin():
    """A relative runbook_url cannot be opened from a notification: every committed link is https://."""
    assert DEFAULT.runbook_url.startswith("https://")
    files = render_bundle()
    urls = [
        r["annotations"]["runbook_url"]
        for g in yaml.safe_load(files["alerts/kvoffload.rules.yaml"])["groups"]
        for r in g["rules"]
        if "alert" in r
    ]
    urls += re.findall(r"runbook_url: (\S+)", files[GRAFANA_RULES])
    assert urls and all(u.startswith("https://") and "#kvoffload" in u for u in urls), urls
    assert f'runbookURLPattern: "{DEFAULT.runbook_url}#%s"' in files["mixin.libsonnet"]


def test_jsonnet_mixin_one_config_field_overridden_shows_in_the_rendered_alert(tmp_path):
    """Overriding one `_config` threshold changes that alert's `for`, and only that alert's."""
    jsonnet = pytest.importorskip("_jsonnet")
    assert main(["bundle", "--out", str(tmp_path)]) == 0
    (tmp_path / "eval.jsonnet").write_text(
        "local m = (import 'mixin.libsonnet') + { _config+:: { thresholds+: { not_storing_for: '2h' } } };"
        " m.prometheusAlerts"
    )
    out = json.loads(jsonnet.evaluate_file(str(tmp_path / "eval.jsonnet")))
    fors = {r["alert"]: r["for"] for g in out["groups"] for r in g["rules"]}
    default = {
        r["alert"]: r["for"] for g in yaml.safe_load(RULES.read_text())["groups"] for r in g["rules"] if "alert" in r
    }
    assert fors["KVOffloadNotStoring"] == "2h" != default["KVOffloadNotStoring"]
    assert {a: f for a, f in fors.items() if a != "KVOffloadNotStoring"} == {
        a: f for a, f in default.items() if a != "KVOffloadNotStoring"
    }


def test_grafana_copy_of_an_absence_alert_alerts_on_no_data():
    """`absent()` fires on nothing; Grafana's own form is a presence query whose *no data* alerts. Every other
    rule keeps `noDataState: OK` (its query returns series only while the condition holds)."""
    doc = yaml.safe_load(render_bundle()[GRAFANA_RULES])
    prom = {a.alert: a for a in build()[1]}
    rules = {r["title"]: r for r in doc["groups"][0]["rules"]}
    absent = [name for name, a in prom.items() if a.grafana_presence]
    assert absent == ["KVOffloadExporterAbsent"] and prom[absent[0]].expr.startswith("absent(")
    for name, r in rules.items():
        refs = {d["refId"]: d["model"] for d in r["data"]}
        if name in absent:
            assert r["noDataState"] == "Alerting" and refs["A"]["expr"] == prom[name].grafana_presence
            assert refs["C"]["expression"] == "$B < 0"  # a value (count >= 1) never fires
        else:
            assert r["noDataState"] == "OK" and refs["C"]["expression"] == "is_number($B)"


def test_every_alert_name_is_defined_once_and_has_a_rule_and_a_case() -> None:
    """Alert names are AlertName members: the rules, their promtool cases and steps name the member, so a
    misspelt name is an attribute error, and an alert without a rule (or a rule without a name) fails here."""
    from kvoffload_exporter.bundle.alerting.ruletypes import AlertName
    from kvoffload_exporter.bundle.ruletests.cases import BUILDERS, STEPS

    _, alerts = build()
    assert [a.alert for a in alerts] == list(AlertName)
    assert all(type(a.alert) is str for a in alerts)  # the rule files carry plain strings
    assert set(BUILDERS) == set(STEPS) == set(AlertName)

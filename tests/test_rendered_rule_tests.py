"""`bundle --out DIR` writes promtool tests for the rules it rendered: one file per alert with a firing and a
silent case, consistent with `--set`/`--selector`. A pure check compares every expectation with the rendered
rules; with promtool installed the files run against them, for default and changed settings."""

from __future__ import annotations

import glob
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

pytest.importorskip("grafanalib")

from kvoffload_exporter.bundle import ruletests
from kvoffload_exporter.bundle.alerting.promql import parse_selector
from kvoffload_exporter.bundle.ruletests import testvalues as tv
from kvoffload_exporter.cli import main

PROMTOOL = shutil.which("promtool")
needs_promtool = pytest.mark.skipif(PROMTOOL is None, reason="promtool not installed (apt-get install prometheus)")

VARIANTS = {
    "default": [],
    "rehearsal": ["--preset", "rehearsal"],
    "selectors": ["--selector", "job=my-vllm", "--selector", 'namespace=~"llm-.*"', "--selector", "env!=dev"],
    "engine-selector": ["--selector", "engine=1", "--selector", 'target=~"vllm-(a|b)"'],
    "windows": [
        *("--set", "reuse_window=2h", "--set", "store_without_load_min_bytes=1e15", "--set", "allocation_window=7m"),
        *("--set", "slower_min_delta_seconds=0.5", "--set", "ttft_regression_ratio=3", "--set", "absent_for=2d"),
        *("--set", "slower_controls=control_.*", "--set", "ttft_quantile=0.5", "--set", "headroom_min_tier_ratio=0"),
        *("--set", "target_down_for=0s", "--set", "oom_risk_for=500ms", "--set", "runbook_url=https://rb.example/x"),
    ],
}


def _render(tmp_path: Path, args: list[str]) -> Path:
    out = tmp_path / "bundle"
    assert main(["bundle", "--out", str(out), *args]) == 0
    return out


def _selectors(args: list[str]):
    return [parse_selector(args[i + 1]) for i, a in enumerate(args) if a == "--selector"]


def _series_labels(text: str) -> dict[str, str]:
    return dict(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', text[text.index("{") :]))


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_rendered_expectations_match_the_rendered_rules(tmp_path, variant):
    """Pure check: every alert of the rendered rule file has its test file; each case names the alert, waits
    past its `for`, expects its severity and annotations as rendered, and feeds series the selectors match."""
    args = VARIANTS[variant]
    out = _render(tmp_path, args)
    rules = yaml.safe_load((out / "alerts/kvoffload.rules.yaml").read_text())
    alerts = {r["alert"]: r for g in rules["groups"] for r in g["rules"] if "alert" in r}
    selectors = _selectors(args)
    files = sorted(glob.glob(str(out / "alerts/tests/rendered-*.test.yaml")))
    assert len(files) == len(alerts) == len(ruletests.BUILDERS)
    for f in files:
        text = Path(f).read_text()
        doc = yaml.safe_load(text)
        assert (Path(f).parent / doc["rule_files"][0]).resolve() == (out / "alerts/kvoffload.rules.yaml").resolve()
        left_out = len(re.findall(r"^# Left out", text, re.M))
        assert len(doc["tests"]) + left_out == 2
        step = tv.duration_ms(doc["evaluation_interval"])
        for case in doc["tests"]:
            for s in case["input_series"]:
                labels = _series_labels(s["series"])
                assert all(tv.matches(m, labels.get(m.label, "")) for m in selectors), (f, s)
            (test,) = case["alert_rule_test"]
            rule = alerts[test["alertname"]]
            assert Path(f).name == f"rendered-{rule['alert'].lower()}.test.yaml"
            assert tv.duration_ms(test["eval_time"]) >= tv.duration_ms(rule["for"]) + step
            assert tv.duration_ms(test["eval_time"]) % step == 0
            assert ("fires" in case["name"]) == bool(test["exp_alerts"])
            for exp in test["exp_alerts"]:
                assert exp["exp_labels"]["severity"] == rule["labels"]["severity"]
                assert all(tv.matches(m, exp["exp_labels"].get(m.label, "")) for m in selectors)
                ann = exp["exp_annotations"]
                assert ann["summary"] == rule["annotations"]["summary"]
                assert ann["runbook_url"] == rule["annotations"]["runbook_url"]
                assert "{{" not in ann["description"]
    if variant == "default":  # every alert can fire as committed: nothing left out
        assert all("Left out" not in Path(f).read_text() for f in files)


def test_changed_windows_reach_the_expected_annotations(tmp_path):
    out = _render(tmp_path, ["--set", "reuse_window=2h", "--set", "allocation_window=7m"])
    swl = yaml.safe_load((out / "alerts/tests/rendered-kvoffloadstorewithoutload.test.yaml").read_text())
    (exp,) = swl["tests"][0]["alert_rule_test"][0]["exp_alerts"]
    assert "in the last 2h and loaded nothing back" in exp["exp_annotations"]["description"]
    alloc = yaml.safe_load((out / "alerts/tests/rendered-kvoffloadallocationfailures.test.yaml").read_text())
    (exp,) = alloc["tests"][0]["alert_rule_test"][0]["exp_alerts"]
    assert "in the last 7m" in exp["exp_annotations"]["description"]


def test_committed_checkout_holds_the_rendered_tests_of_the_default_rules():
    root = Path(__file__).resolve().parents[1]
    names = {Path(p).name for p in glob.glob(str(root / "alerts/tests/rendered-*.test.yaml"))}
    assert names == {Path(ruletests.path(a)).name for a in ruletests.BUILDERS}


@pytest.mark.parametrize(
    ("value", "fn", "text"),
    [  # texts Prometheus rendered in alerts/tests/kvoffload.test.yaml and Go's own examples
        (40957378560, tv.humanize1024, "38.14Gi"),
        (536870912, tv.humanize1024, "512Mi"),
        (-1073741824, tv.humanize1024, "-1Gi"),
        (0.5, tv.humanize1024, "0.5"),
        (1.88, tv.humanize, "1.88"),
        (1234567, tv.humanize, "1.235M"),
        (0.0277, tv.humanize_duration, "27.7ms"),
        (0.35, tv.humanize_duration, "350ms"),
        (90061, tv.humanize_duration, "1d 1h 1m 1s"),
        (61, tv.humanize_duration, "1m 1s"),
        (1.5, tv.humanize_duration, "1.5s"),
        (0, tv.humanize_duration, "0s"),
    ],
)
def test_annotation_numbers_render_as_prometheus_renders_them(value, fn, text):
    assert fn(value) == text


def test_unknown_template_form_is_refused():
    with pytest.raises(ValueError, match="not understood"):
        tv.render("{{ $value | printf }}", {}, 1)


@pytest.mark.parametrize(
    ("raw", "ok"),
    [
        ('namespace=~"llm-.*"', "llm-"),
        ('target=~"vllm-(a|b)"', "vllm-a"),
        ("env!=dev", ""),
        ('m=~"[a-z]+\\d{2}"', "a00"),
    ],
)
def test_selector_values_satisfy_the_selector(raw, ok):
    m = parse_selector(raw)
    assert tv.label_value(m.label, "", [m]) == ok


@needs_promtool
@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_promtool_passes_the_rendered_tests(tmp_path, variant):
    out = _render(tmp_path, VARIANTS[variant])
    files = sorted(glob.glob(str(out / "alerts/tests/*.yaml")))
    res = subprocess.run([PROMTOOL, "test", "rules", *files], capture_output=True, text=True, timeout=300, check=False)
    assert res.returncode == 0, res.stdout + res.stderr


@needs_promtool
def test_rendered_tests_catch_rules_rendered_with_other_settings(tmp_path):
    """Tests for min 1e9 B against rules that want 1e15 B: the firing StoreWithoutLoad case must fail."""
    out = _render(tmp_path, [])
    other = _render(tmp_path / "other", ["--set", "store_without_load_min_bytes=1e15"])
    shutil.copy(other / "alerts/kvoffload.rules.yaml", out / "alerts/kvoffload.rules.yaml")
    f = out / "alerts/tests/rendered-kvoffloadstorewithoutload.test.yaml"
    res = subprocess.run([PROMTOOL, "test", "rules", str(f)], capture_output=True, text=True, timeout=120, check=False)
    assert res.returncode != 0
    assert "KVOffloadStoreWithoutLoad fires" in res.stdout + res.stderr


def test_each_header_names_only_files_the_bundle_writes(tmp_path):
    """The header of a rendered test says how to run it with files `bundle --out DIR` wrote:
    every path or glob it names matches files under DIR, and no hand-written file of the checkout is named."""
    out = _render(tmp_path, [])
    rendered = sorted((out / "alerts/tests").glob("*.yaml"))
    assert rendered
    for f in rendered:
        header = [line for line in f.read_text().splitlines() if line.startswith("#")]
        named = re.findall(r"alerts/tests/[\w.*-]+", "\n".join(header))
        assert named, f"{f.name}: the header says nothing about how to run it"
        for pattern in named:
            assert glob.glob(str(out / pattern)), f"{f.name} names {pattern}, which bundle --out did not write"
        assert "kvoffload.test.yaml" not in "\n".join(header)

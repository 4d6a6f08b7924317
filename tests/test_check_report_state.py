"""`check`'s text report states the exporter's evidence state per engine over the run and, when the state
needs explaining, the reason and its hint (the reason in the text of `inspect` and `check`)."""

from __future__ import annotations

import copy
import json

from conftest import FIXTURES

from kvoffload_exporter.canary.check import report

REAL = FIXTURES / "vllm-0.26.0-h200-native" / "check_concurrency_0.6b.json"


def _doc() -> dict[str, object]:
    return json.loads(REAL.read_text(encoding="utf-8"))


def test_a_real_runs_hit_engine_is_named_without_a_reason() -> None:
    out = report.text(_doc())
    assert "engine Qwen/Qwen3-0.6B/0 over the run: hit" in out
    assert "why:" not in out


def test_a_store_without_load_engine_gets_its_reason_and_hint() -> None:
    doc = _doc()
    interval = copy.deepcopy(doc["interval"])
    assert isinstance(interval, dict)
    interval["engines"][0]["state"] = "store_without_load"
    interval["engines"][0]["state_reason"] = "lookup_always_misses"
    doc["interval"] = interval
    out = report.text(doc)
    line = next(x for x in out.splitlines() if x.startswith("engine Qwen/Qwen3-0.6B/0"))
    assert "store_without_load, why: lookup_always_misses - the tier is asked and never hits" in line


def test_the_report_names_the_rank_sum_method_not_the_bootstrap() -> None:
    """The verdict table and the sweep say what decides: the Hodges-Lehmann shift and its exact rank-sum
    interval, at the confidence actually used (98.75 % over four levels is not printed as 99 %)."""
    doc = _doc()
    out = report.text(doc)
    assert "bootstrap CI" not in out and "interval: bursts resampled" not in out
    assert "HL shift ms" in out and "% rank-sum CI ms" in out
    assert "Hodges-Lehmann shift of the burst medians, exact rank-sum interval" in out
    assert "95% CI ms" in out
    for entry in doc["load_sweep"]:  # type: ignore[union-attr]
        entry["confidence"] = 0.9875  # four levels, Bonferroni
    assert "98.75% CI ms" in report.text(doc) and "99% CI ms" not in report.text(doc)


def test_the_verdict_section_of_the_docs_describes_the_rank_sum_method() -> None:
    """docs/canary.md's verdict section: the Hodges-Lehmann shift and the exact rank-sum interval, 4 a side at
    95 %; no percentile or cluster bootstrap, no pooled-median delta, no 3-sample floor."""
    from pathlib import Path

    text = (Path(__file__).resolve().parents[1] / "docs/canary.md").read_text(encoding="utf-8")
    start = text.index("## Results, reasons and the verdict")
    section = text[start : text.index("\n## ", start + 1)]
    verdict = section[section.index("The **verdict**") : section.index("Medians, p25 and p75")]
    assert "Hodges–Lehmann shift" in verdict and "exact rank-sum" in verdict and "4 samples (bursts) a side" in verdict
    for old in ("bootstrap", "percentile", "median(offload_hit) − median(control)", "fewer than 3 samples"):
        assert old not in verdict, old

"""The README and the GPU reference doc state the H200 load sweep exactly as the recorded run says.

The numbers are read from the recorded files (tests/fixtures/vllm-0.26.0-h200-sweep/<shape>/report.json and
requests.jsonl.gz), never typed into the test: re-recording the run moves the test with it, and a doc that
drifts fails. The recorded report holds the interval method of its day (a percentile bootstrap of pooled
medians); the README states the run re-decided with the current method (tools/gpuref/reanalyse.py), and the
GPU reference doc shows both side by side.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import FIXTURES

from kvoffload_exporter.canary.check.advice import Action
from kvoffload_exporter.canary.cycle.stats import pooled_bootstrap
from tools.gpuref.reanalyse import _rows, reanalyse

ROOT = Path(__file__).resolve().parents[1]
SWEEP = FIXTURES / "vllm-0.26.0-h200-sweep"  # 2026-12-02, decided with the pooled-median bootstrap
RANK = FIXTURES / "vllm-0.26.0-h200-sweep-rank"  # 2026-12-04, decided with the rank-sum method
MODELS = {"0.6b": "Qwen3-0.6B", "14b": "Qwen3-14B"}


def _doc(shape: str, run: Path = SWEEP) -> dict:  # type: ignore[type-arg]
    return json.loads((run / shape / "report.json").read_text(encoding="utf-8"))  # type: ignore[no-any-return]


def _cell(e: dict) -> str:  # type: ignore[type-arg]
    d, lo, hi = (e[k] * 1000 for k in ("delta_ttft_seconds", "ci_low_seconds", "ci_high_seconds"))
    text = f"{d:+.1f} ms [{lo:+.1f}, {hi:+.1f}]".replace("-", "−")
    return f"**{text.split(' [')[0]}** [{text.split(' [')[1]}" if e["verdict"] != "inconclusive" else text


@pytest.mark.parametrize("shape", sorted(MODELS))
def test_readme_row_is_the_rank_sum_run(shape: str) -> None:
    doc = _doc(shape, RANK)
    lines = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    (row,) = [ln for ln in lines if ln.startswith(f"| {MODELS[shape]} |") and "`" + doc["advice"]["action"] in ln]
    for e in doc["load_sweep"]:
        assert _cell(e) in row, (e["concurrency"], row)
    assert f"`{doc['advice']['action']}` ({doc['exit_code']})" in row


@pytest.mark.parametrize("shape", sorted(MODELS))
def test_the_rank_sum_run_is_what_its_own_records_decide(shape: str) -> None:
    """On real GPU data: every level's interval and verdict, the advice and the exit code recomputed from the
    run's request records and counted rounds are the ones its report printed."""
    doc = _doc(shape, RANK)
    new = reanalyse(doc, _rows(RANK / shape))
    assert doc["decision"]["levels"] == new["levels"] == 4
    for old, now in zip(doc["load_sweep"], new["load_sweep"], strict=True):
        assert old["verdict"] == now["verdict"] and old["confidence"] == now["confidence"]
        for key in ("delta_ttft_seconds", "ci_low_seconds", "ci_high_seconds"):  # the report rounds to 1 us
            assert old[key] == pytest.approx(now[key], abs=2e-6), (shape, old["concurrency"], key)
    assert (doc["advice"]["action"], doc["exit_code"]) == (new["advice"]["action"], new["exit_code"])


@pytest.mark.parametrize("shape", sorted(MODELS))
def test_the_reference_doc_shows_old_and_new_side_by_side(shape: str) -> None:
    doc, new = _doc(shape), reanalyse(_doc(shape), _rows(SWEEP / shape))
    text = (ROOT / "docs/gpu-reference/vllm-0.26-h200-concurrency.md").read_text(encoding="utf-8")
    section = text.split("## 9.", 1)[1]
    for old, now in zip(doc["load_sweep"], new["load_sweep"], strict=True):
        (row,) = [ln for ln in section.splitlines() if ln.startswith(f"| {MODELS[shape]} | {old['concurrency']} |")]
        assert _cell(old) in row and _cell(now) in row, row


@pytest.mark.parametrize("shape", sorted(MODELS))
def test_recorded_sweep_has_ten_bursts_a_level_and_one_advice(shape: str) -> None:
    doc = _doc(shape)
    assert doc["advice"]["action"] in {a.value for a in Action}
    for e in doc["load_sweep"]:
        assert min(e["bursts_offload"], e["bursts_control"]) >= 10 == e["min_bursts"]


def test_the_0_6b_tier_pays_off_at_no_measured_level() -> None:
    doc = _doc("0.6b")
    assert not [e for e in doc["load_sweep"] if e["verdict"] == "offload_faster"]
    assert doc["advice"]["action"] == "measure_longer" and "at no measured level" in doc["advice"]["why"]


def test_recorded_c1_row_is_the_headline_verdicts_samples() -> None:
    for shape in MODELS:
        doc = _doc(shape)
        (c1,) = [e for e in doc["load_sweep"] if e["concurrency"] == 1]
        assert c1["source"] == "rounds" and c1["verdict"] == doc["verdict"]
        assert c1["delta_ttft_seconds"] == doc["delta_ttft_seconds"]


def test_recorded_intervals_are_reproducible_from_the_counted_bursts() -> None:
    """The recorded (old-method) interval recomputed from the recorded bursts (by `counted_cycles`) with the
    pooled-median bootstrap it used, seed 0 and 2,000 resamples as recorded."""
    import gzip

    for shape in MODELS:
        doc = _doc(shape)
        with gzip.open(SWEEP / shape / "requests.jsonl.gz", "rt", encoding="utf-8") as f:
            rows = [json.loads(x) for x in f if x.strip()]
        for e in doc["load_sweep"]:
            if e["source"] != "sweep":
                continue
            bursts = {}
            for side, phase in (("offload", "sweep_offload"), ("control", "sweep_control")):
                want = set(e["counted_cycles"][side])
                by: dict[int, list[float]] = {}
                for r in rows:
                    if (
                        r["phase"] == phase
                        and r["kind"] == "burst"
                        and r["cycle"] in want
                        and r["ttft_seconds"] is not None
                    ):
                        by.setdefault(r["cycle"], []).append(r["ttft_seconds"])
                bursts[side] = [by[c] for c in e["counted_cycles"][side]]
            a = [sorted(b) for b in bursts["offload"]]
            b = [sorted(b) for b in bursts["control"]]
            low, high = pooled_bootstrap(a, b, 0.5, 0.95, 2000, 0)
            assert low == pytest.approx(e["ci_low_seconds"], abs=1e-6)
            assert high == pytest.approx(e["ci_high_seconds"], abs=1e-6)

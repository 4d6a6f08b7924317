"""The README's performance figure is written by `bench/pipeline.py` from a recorded run, never typed:
the row in the README is exactly what the benchmark renders from `bench/results/pipeline.json`."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _bench() -> object:
    spec = importlib.util.spec_from_file_location("bench_pipeline", ROOT / "bench" / "pipeline.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_readme_figure_is_the_recorded_benchmark_run() -> None:
    recorded = json.loads((ROOT / "bench" / "results" / "pipeline.json").read_text(encoding="utf-8"))
    row = _bench().readme_row(recorded)  # type: ignore[attr-defined]
    assert row in (ROOT / "README.md").read_text(encoding="utf-8"), f"regenerate the README row: {row}"


def test_the_recorded_run_times_every_stage_of_the_real_capture() -> None:
    recorded = json.loads((ROOT / "bench" / "results" / "pipeline.json").read_text(encoding="utf-8"))
    assert set(recorded["stages_median_ms"]) == {"read", "normalise", "derive", "render", "merge", "gzip"}
    assert recorded["capture"] == "A_12_final.prom" and recorded["target_ratio"] == 25

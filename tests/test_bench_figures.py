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


def test_the_figure_is_the_run_with_the_median_ratio_with_every_runs_ratio_kept() -> None:
    runs = [
        {"ratio_vs_prometheus_client": r, "pipeline_median_ms": p, "prometheus_client_parse_median_ms": b}
        for r, p, b in ((27.0, 0.5, 13.5), (22.0, 0.6, 13.2), (25.0, 0.4, 10.0))
    ]
    got = _bench().median_of_runs(runs)  # type: ignore[attr-defined]
    assert (got["ratio_vs_prometheus_client"], got["pipeline_median_ms"]) == (25.0, 0.4)  # one run's own pair
    assert (got["runs"], got["ratio_min"], got["ratio_max"]) == ([27.0, 22.0, 25.0], 22.0, 27.0)


def test_the_recorded_figure_is_the_median_of_its_runs() -> None:
    recorded = json.loads((ROOT / "bench" / "results" / "pipeline.json").read_text(encoding="utf-8"))
    runs = sorted(recorded["runs"])
    assert len(runs) % 2 == 1 and recorded["ratio_vs_prometheus_client"] == runs[len(runs) // 2]
    assert f"{recorded['ratio_min']:.1f}–{recorded['ratio_max']:.1f}×" in _bench().readme_row(recorded)  # type: ignore[attr-defined]

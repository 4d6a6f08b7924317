"""Benchmark of the simulator's load model: ΔTTFT of c concurrent CPU-tier revisits vs recompute, per level.

Deterministic (noise off, stepped clock), so the printed crossover is the model's, not the machine's:
the H200 0.6B calibration (one load amortised, as measured on the H200) pays off from c ≈ 11; the 32B calibration with
the vllm#44294 convoy pays off up to c ≈ 27.

    python bench/load_sweep.py [--json]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kvoffload_exporter.canary.check.sweepreport import crossover
from kvoffload_exporter.sim.bursts import bursts

CASES = (
    ("h200-qwen3-0.6b", "amortised (default)", {}),
    ("h200-qwen3-32b", "amortised (default)", {}),
    ("h200-qwen3-32b", "convoy (vllm#44294)", {"load_convoy": 1.0, "inflight_recompute": 0.0}),
)
LEVELS = (1, 2, 4, 8, 16, 32)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    report = []
    for cal, model, timing in CASES:
        rows = bursts(cal, LEVELS, timing)
        entries = [
            {
                "concurrency": r.concurrency,
                "prefix_tokens": 5120,
                "delta_ttft_seconds": r.delta_ms / 1000,
                "verdict": "offload_slower" if r.delta_ms > 0 else "offload_faster",
            }
            for r in rows
        ]
        cross = crossover(entries)
        report.append(
            {
                "calibration": cal,
                "load_model": model,
                "delta_ms": {r.concurrency: round(r.delta_ms, 1) for r in rows},
                "crossover": cross["text"],
            }
        )
    if args.json:
        print(json.dumps(report, indent=2))
        return 0
    for r in report:
        deltas = "  ".join(f"c={c}: {d:+.1f}" for c, d in r["delta_ms"].items())
        print(f"{r['calibration']:<17} {r['load_model']:<20} {deltas}\n{'':<38} -> {r['crossover']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

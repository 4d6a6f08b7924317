"""Benchmark: the whole poll pipeline (parse + normalise + derive + render) vs prometheus_client's parser.

Both run on the same real vLLM 0.26.0 capture in the same process, interleaved, so the ratio holds on
any machine; absolute times are printed for context only.

    python bench/pipeline.py --json
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from exporter import derive
from exporter.collector import TargetView, collect
from exporter.exposition import LineCache
from exporter.normalise import normalise

CAPTURE = Path(__file__).resolve().parents[1] / "tests/fixtures/h200-0.6b/A_12_final.prom"  # a real vLLM 0.26.0 body


LINES = LineCache()  # the benchmarked target's own, as TargetPoller keeps one


def pipeline(text: str, prev: derive.Point | None, t: float) -> tuple[derive.Point, str]:
    snap = normalise(text, None, LINES)
    point = derive.advance(prev, snap, t)
    history = [prev, point] if prev else [point]
    derived = derive.derive(history, t, 300.0)
    view = TargetView(
        label="vllm",
        url="http://127.0.0.1:8000",
        up=True,
        snapshot=snap,
        derived=derived,
        version="0.26.0",
        last_success=t,
        duration=0.001,
        body_bytes=len(text),
    )
    return point, collect([view], "5m")


def baseline(text: str) -> int:
    return sum(len(f.samples) for f in text_string_to_metric_families(text))


def _time(fn, reps: int) -> list[float]:  # type: ignore[no-untyped-def]
    out = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t0)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--reps", type=int, default=20)
    args = ap.parse_args()
    text = CAPTURE.read_text()
    state: dict[str, object] = {"prev": None, "t": 0.0}

    def run_pipeline() -> None:
        state["t"] = float(state["t"]) + 5.0  # type: ignore[arg-type]
        state["prev"], _ = pipeline(text, state["prev"], state["t"])  # type: ignore[arg-type]

    samples = sum(1 for line in text.splitlines() if line and not line.startswith("#"))
    run_pipeline()
    baseline(text)  # warm both paths
    ours, theirs = [], []
    for _ in range(args.rounds):  # interleave so machine noise hits both alike
        theirs += _time(lambda: baseline(text), max(1, args.reps // 5))
        ours += _time(run_pipeline, args.reps)
    p, b = statistics.median(ours), statistics.median(theirs)
    result = {
        "capture": CAPTURE.name,
        "body_bytes": len(text.encode()),
        "samples": samples,
        "pipeline_median_ms": round(p * 1000, 4),
        "prometheus_client_parse_median_ms": round(b * 1000, 4),
        "ratio_vs_prometheus_client": round(b / p, 2),
        "target_ratio": 20,
        "python": sys.version.split()[0],
    }
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        for k, v in result.items():
            print(f"{k:36} {v}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

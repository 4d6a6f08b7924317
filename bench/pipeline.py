"""Benchmark: the whole poll pipeline (read + normalise + derive + render) vs prometheus_client's parser.

Both run on the same real vLLM 0.26.0 capture in the same process, interleaved, so the ratio holds on
any machine; absolute times are printed for context only. Every poll sees a new body: each counter,
histogram bucket, `_sum` and `_count` of the capture advances (as `bench/scale.py`'s targets do), so
nothing is skipped as unchanged; the target keeps its LineCache between polls, as a TargetPoller does.

    python bench/pipeline.py --json          # the ratio, and the time per stage
    python bench/pipeline.py --record        # ... also written to bench/results/pipeline.json
    python bench/pipeline.py --readme        # the README's row, from bench/results/pipeline.json
"""

from __future__ import annotations

import argparse
import gzip
import inspect
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import CAPTURE, AdvancingBodies
from kvoffload_exporter import derive
from kvoffload_exporter import normalise as normalise_module
from kvoffload_exporter.collector import TargetView, collect, shared_fragment, target_fragment
from kvoffload_exporter.exposition import read
from kvoffload_exporter.limits import Limits
from kvoffload_exporter.normalise import normalise
from kvoffload_exporter.render import merge
from kvoffload_exporter.samples import labels_reader

try:
    from kvoffload_exporter.exposition import LineCache
except ImportError:  # an older tree, measured for the before column
    LineCache = None  # type: ignore[assignment,misc]

RECORDED = Path(__file__).resolve().parent / "results" / "pipeline.json"
TARGET_RATIO, STRETCH_RATIO = 25, 40
STAGES = ("read", "normalise", "derive", "render", "merge", "gzip")


def _cache() -> Any:
    return LineCache() if LineCache is not None else None


_TAKES_CACHE = len(inspect.signature(normalise).parameters) >= 3  # once: signature() costs ~10 µs a call


def _normalise(text: str, cache: Any) -> Any:
    if cache is not None and _TAKES_CACHE:
        return normalise(text, None, cache)
    return normalise(text)


def _view(snap: Any, derived: Any, t: float, size: int) -> TargetView:
    return TargetView(
        label="vllm",
        url="http://127.0.0.1:8000",
        up=True,
        snapshot=snap,
        derived=derived,
        version="0.26.0",
        last_success=t,
        duration=0.001,
        body_bytes=size,
    )


class Target:
    """One polled target: its history, its LineCache and its formatted series names, kept across polls."""

    def __init__(self) -> None:
        self.prev: derive.Point | None = None
        self.t = 0.0
        self.cache = _cache()
        self.reader = _cache()  # for `read` timed alone in stages()
        self.heads: dict[tuple[str, ...], str] = {}

    def poll(self, text: str) -> str:
        """The pipeline as timed against prometheus_client: normalise, advance, derive, render."""
        self.t += 5.0
        snap = _normalise(text, self.cache)
        point = derive.advance(self.prev, snap, self.t)
        derived = derive.derive([self.prev, point] if self.prev else [point], self.t, 300.0)
        self.prev = point
        return collect([_view(snap, derived, self.t, len(text))], "5m")

    def stages(self, text: str) -> dict[str, float]:
        """The same poll split into stages. `read` is timed on its own (with a warm cache of its own,
        as in a poll) and subtracted from the whole of normalise, which includes it."""
        self.t += 5.0
        n = Limits().label_value_length_limit
        args: tuple[Any, ...] = (text, normalise_module._SELECTOR, labels_reader(n), Limits().sample_limit)
        args += (32 * n + 1024,) if self.reader is None else (32 * n + 1024, self.reader, n)
        t0 = time.perf_counter()
        read(*args)
        t1 = time.perf_counter()
        snap = _normalise(text, self.cache)
        t2 = time.perf_counter()
        point = derive.advance(self.prev, snap, self.t)
        derived = derive.derive([self.prev, point] if self.prev else [point], self.t, 300.0)
        self.prev = point
        t3 = time.perf_counter()
        frag = target_fragment(_view(snap, derived, self.t, len(text)), "5m", self.heads)
        t4 = time.perf_counter()
        body = merge([shared_fragment(None, None, {}), frag]).encode()
        t5 = time.perf_counter()
        gzip.compress(body, 6)
        t6 = time.perf_counter()
        read_s = t1 - t0
        return {
            "read": read_s,
            "normalise": max(0.0, t2 - t1 - read_s),
            "derive": t3 - t2,
            "render": t4 - t3,
            "merge": t5 - t4,
            "gzip": t6 - t5,
        }


def baseline(text: str) -> int:
    return sum(len(f.samples) for f in text_string_to_metric_families(text))


def measure(rounds: int, reps: int) -> dict[str, Any]:
    text = CAPTURE.read_text()
    bodies = AdvancingBodies(text, per=1000)
    n = 0
    target = Target()
    target.poll(bodies.body(n))
    baseline(text)  # warm both paths
    ours, theirs = [], []
    for _ in range(rounds):  # interleave so machine noise hits both alike
        batch = [bodies.body(n + i + 1) for i in range(reps)]
        for body in batch[: max(1, reps // 5)]:
            t0 = time.perf_counter()
            baseline(body)
            theirs.append(time.perf_counter() - t0)
        for body in batch:
            t0 = time.perf_counter()
            target.poll(body)
            ours.append(time.perf_counter() - t0)
        n += reps
    stages: dict[str, list[float]] = {s: [] for s in STAGES}
    staged = Target()
    for i in range(rounds * reps):
        for s, v in staged.stages(bodies.body(n + i + 1)).items():
            stages[s].append(v)
    p, b = statistics.median(ours), statistics.median(theirs)
    return {
        "capture": CAPTURE.name,
        "body_bytes": len(text.encode()),
        "samples": sum(1 for line in text.splitlines() if line and not line.startswith("#")),
        "pipeline_median_ms": round(p * 1000, 4),
        "prometheus_client_parse_median_ms": round(b * 1000, 4),
        "ratio_vs_prometheus_client": round(b / p, 2),
        "target_ratio": TARGET_RATIO,
        "stretch_ratio": STRETCH_RATIO,
        "stages_median_ms": {s: round(statistics.median(v) * 1000, 4) for s, v in stages.items()},
        "python": sys.version.split()[0],
        "load_average_1m": round(os.getloadavg()[0], 2),
    }


def readme_row(r: dict[str, Any]) -> str:
    """The README's performance row, written from a result of this benchmark (never typed)."""
    return (
        f"| {r['capture']} ({r['body_bytes']:,} bytes, {r['samples']} samples), Python {r['python']} "
        f"| {r['pipeline_median_ms']:.3f} ms | {r['prometheus_client_parse_median_ms']:.2f} ms "
        f"| **{r['ratio_vs_prometheus_client']:.1f}×** (target ≥ {r['target_ratio']}×) |"
    )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--record", action="store_true", help=f"also write the result to {RECORDED}")
    ap.add_argument("--readme", action="store_true", help=f"print the README row of {RECORDED} (no run)")
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--reps", type=int, default=20)
    args = ap.parse_args()
    if args.readme:
        print(readme_row(json.loads(RECORDED.read_text(encoding="utf-8"))))
        return 0
    result = measure(args.rounds, args.reps)
    if args.record:
        RECORDED.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        for k, v in result.items():
            print(f"{k:36} {v}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

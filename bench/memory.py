"""What each polled target keeps in memory: tracemalloc over N real-body targets in one process.

N `TargetPoller`s, each its own model (as `bench/scale.py`'s fake targets: no label set shared between
targets), are fed the real vLLM 0.26.0 capture with every cumulative value advancing until their histories
are full (the window / poll interval points), exactly as `poll_once` does once a body is fetched
(`TargetPoller.ingest`). What was allocated after the start-up and still held at the end is divided by N and
grouped by the structure that allocated it (the module, and the top lines):

    python bench/memory.py                      # 200 targets, the default 5 m window
    python bench/memory.py --targets 200 --window 60 --lines 20

Not counted: the HTTP client's per-target state, the merged `/metrics` body and what start-up loaded
(`bench/scale.py` reads the resident set of a real `serve` for those). Per-process tables that stop
growing at some size (the label-text cache, 4,096 entries) divide out only with enough targets: 200 is enough.
"""

from __future__ import annotations

import argparse
import gc
import json
import sys
import tracemalloc
from collections import Counter
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import CAPTURE, AdvancingBodies
from kvoffload_exporter.config.settings import Config, TargetConfig
from kvoffload_exporter.server.targetpoller import TargetPoller

_MODEL = 'model_name="Qwen/Qwen3-0.6B"'
INTERVAL = 5.0


def _where(filename: str) -> str:
    if "kvoffload_exporter/" in filename:
        return filename.split("kvoffload_exporter/")[-1]
    return filename.rsplit("/", 1)[-1]


def measure(targets: int, window: float, lines: int) -> dict[str, Any]:
    config = Config(window=window)
    bodies = AdvancingBodies(CAPTURE.read_text(encoding="utf-8"), per=100)

    def poller(i: int) -> TargetPoller:
        return TargetPoller(TargetConfig(url=f"http://127.0.0.1:8000/t/{i:04d}", name=f"t{i:04d}"), config)

    warm = poller(99_999)  # what the first target of a process allocates once (tables, pickers) is not counted
    for n in range(1, 4):
        warm.ingest(bodies.body(n).replace(_MODEL, f'{_MODEL[:-1]}-warm"'), n * INTERVAL, "0.26.0")
    gc.collect()
    tracemalloc.start()
    try:
        start = tracemalloc.take_snapshot()
        pollers = [poller(i) for i in range(targets)]
        t = 10.0
        for n in range(1, config.history_len + 3):
            t += INTERVAL
            body = bodies.body(n)
            for i, p in enumerate(pollers):
                p.ingest(body.replace(_MODEL, f'{_MODEL[:-1]}-t{i:04d}"'), t, "0.26.0")
        del body
        gc.collect()
        stats = tracemalloc.take_snapshot().compare_to(start, "lineno")
    finally:
        tracemalloc.stop()
    by_module: Counter[str] = Counter()
    for s in stats:
        by_module[_where(s.traceback[0].filename)] += s.size_diff
    top = sorted(stats, key=lambda s: -s.size_diff)[:lines]
    return {
        "targets": targets,
        "window_s": window,
        "history_points": config.history_len,
        "kib_per_target": round(sum(s.size_diff for s in stats) / targets / 1024, 1),
        "by_module_kib": {m: round(v / targets / 1024, 1) for m, v in by_module.most_common() if v > targets * 256},
        "top_lines": [
            {
                "where": f"{_where(s.traceback[0].filename)}:{s.traceback[0].lineno}",
                "kib": round(s.size_diff / targets / 1024, 2),
                "objects": round(s.count_diff / targets, 1),
            }
            for s in top
        ],
    }


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--targets", type=int, default=200, help="targets polled in the process")
    p.add_argument("--window", type=float, default=300.0, help="the window in seconds (history: window / 5 s + 3)")
    p.add_argument("--lines", type=int, default=12, help="top allocating lines to list")
    p.add_argument("--json", action="store_true", help="print the figures as JSON")
    opts = p.parse_args()
    out = measure(opts.targets, opts.window, opts.lines)
    if opts.json:
        print(json.dumps(out, indent=1))
        return 0
    print(f"{out['kib_per_target']} KiB a target ({opts.targets} targets, {out['history_points']} history points)")
    for module, kib in out["by_module_kib"].items():
        print(f"  {kib:7.1f} KiB  {module}")
    for row in out["top_lines"]:
        print(f"  {row['kib']:7.2f} KiB {row['objects']:6.1f} objects  {row['where']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Benchmark: one target's poll (read, normalise, derive, the fragment) vs prometheus_client's parser.

Both run on the same real vLLM 0.26.0 capture in the same process, interleaved, so the ratio holds on
any machine; absolute times are printed for context only. The timed poll is the product's own:
`TargetPoller.ingest`, the work `poll_once` does once the body is fetched, on a poller with the default
window whose history is full (63 points at 5 m / 5 s), plus merging its fragment into a `/metrics` body.
Every poll sees a new body: each counter, histogram bucket, `_sum` and `_count` of the capture advances
(as `bench/scale.py`'s targets do), so nothing is skipped as unchanged.

    python bench/pipeline.py --json          # the ratio, and the time per stage
    python bench/pipeline.py --record        # ... also written to bench/results/pipeline.json
    python bench/pipeline.py --readme        # the README's row, from bench/results/pipeline.json

One run's ratio moves with the machine's own speed as it runs (a 2-core shared machine read 22.7-28.5x in
twenty single runs of one tree on one morning). So the figure is the median of `--runs` runs (5) in one
process, each interleaved as above; the run with that median ratio gives the times and the stages, and
every run's ratio is kept (`runs`), with the least and the most.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import CAPTURE, AdvancingBodies, prometheus_client_parse
from kvoffload_exporter.config.limits import Limits
from kvoffload_exporter.config.settings import Config, TargetConfig
from kvoffload_exporter.derive import convoy
from kvoffload_exporter.derive import window as derive
from kvoffload_exporter.expose.collector import TargetView, shared_fragment, target_fragment
from kvoffload_exporter.expose.render import merge
from kvoffload_exporter.ingest import normalise as normalise_module
from kvoffload_exporter.ingest.exposition import read
from kvoffload_exporter.ingest.linecache import LineCache
from kvoffload_exporter.ingest.normalise import normalise
from kvoffload_exporter.ingest.samples import labels_reader
from kvoffload_exporter.server.targetpoller import TargetPoller

try:
    from kvoffload_exporter.derive.history import push
except ImportError:  # an older tree, measured for the before column

    def push(history: Any, point: Any) -> None:
        history.append(point)


RECORDED = Path(__file__).resolve().parent / "results" / "pipeline.json"
TARGET_RATIO, STRETCH_RATIO = 25, 40
STAGES = ("read", "normalise", "derive", "render", "merge", "gzip")
INTERVAL = 5.0


def _ingest(poller: TargetPoller, text: str, now: float) -> None:
    if hasattr(poller, "ingest"):
        poller.ingest(text, now, "0.26.0")
        return
    (snap, point, derived), _ = poller._parse_all(text, [], now)  # an older tree: poll_once's same steps
    poller.history.append(point)
    poller._set_view(_view(poller, snap, derived, now, len(text)))


def _view(poller: TargetPoller, snap: Any, derived: Any, now: float, size: int) -> TargetView:
    return TargetView(
        label=poller.cfg.label,
        url=poller.cfg.url,
        up=True,
        errors={},
        duration=0.001,
        body_bytes=size,
        last_success=now,
        version="0.26.0",
        snapshot=snap,
        derived=derived,
        convoy=convoy.derive(poller.history, now, poller.config.window),
    )


class Target:
    """One polled target as the exporter holds it: a TargetPoller with its history, LineCache and
    formatted series, kept across polls. `fill` first polls it until its history is full."""

    def __init__(self, bodies: AdvancingBodies) -> None:
        self.config = Config()
        self.poller = TargetPoller(TargetConfig(url="http://127.0.0.1:8000", name="vllm"), self.config)
        self.t = 0.0
        self.reader = LineCache()  # for `read` timed alone in stages()
        self.shared = shared_fragment(None, None, {})
        self.n = 0
        for _ in range(self.config.history_len):
            self.poll(bodies.body(self.next()))

    def next(self) -> int:
        self.n += 1
        return self.n

    def poll(self, text: str) -> bytes:
        """The pipeline as timed against prometheus_client: the poller's own work on the body, then
        its fragment merged into a `/metrics` body (done once per scrape generation)."""
        self.t += INTERVAL
        _ingest(self.poller, text, self.t)
        return merge([self.shared, self.poller.fragment]).encode()

    def stages(self, text: str) -> dict[str, float]:
        """The same poll split into stages. `read` is timed on its own (with a warm cache of its own,
        as in a poll) and subtracted from the whole of normalise, which includes it."""
        self.t += INTERVAL
        p = self.poller
        lim = Limits()
        n = lim.label_value_length_limit
        t0 = time.perf_counter()
        read(
            text,
            normalise_module._SELECTORS["vllm:"],
            labels_reader(n),
            lim.sample_limit,
            32 * n + 1024,
            self.reader,
            n,
        )
        t1 = time.perf_counter()
        snap = normalise(text, lim, p._lines)
        t2 = time.perf_counter()
        point = derive.advance(p.history[-1] if p.history else None, snap, self.t)
        derived = derive.derive([*p.history, point], self.t, self.config.window)
        t3 = time.perf_counter()
        push(p.history, point)
        frag = target_fragment(_view(p, snap, derived, self.t, len(text)), self.config.window_label, p._heads)
        t4 = time.perf_counter()
        body = merge([self.shared, frag]).encode()
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


def measure(rounds: int, reps: int) -> dict[str, Any]:
    text = CAPTURE.read_text()
    bodies = AdvancingBodies(text, per=1000)
    target = Target(bodies)
    prometheus_client_parse(text)  # warm both paths
    ours, theirs = [], []
    for _ in range(rounds):  # interleave so machine noise hits both alike
        batch = [bodies.body(target.next()) for _ in range(reps)]
        for body in batch[: max(1, reps // 5)]:
            t0 = time.perf_counter()
            prometheus_client_parse(body)
            theirs.append(time.perf_counter() - t0)
        for body in batch:
            t0 = time.perf_counter()
            target.poll(body)
            ours.append(time.perf_counter() - t0)
    stages: dict[str, list[float]] = {s: [] for s in STAGES}
    staged = Target(bodies)
    for _ in range(rounds * reps):
        for s, v in staged.stages(bodies.body(staged.next())).items():
            stages[s].append(v)
    p, b = statistics.median(ours), statistics.median(theirs)
    return {
        "capture": CAPTURE.name,
        "body_bytes": len(text.encode()),
        "samples": sum(1 for line in text.splitlines() if line and not line.startswith("#")),
        "history_points": len(target.poller.history),
        "pipeline_median_ms": round(p * 1000, 4),
        "prometheus_client_parse_median_ms": round(b * 1000, 4),
        "ratio_vs_prometheus_client": round(b / p, 2),
        "target_ratio": TARGET_RATIO,
        "stretch_ratio": STRETCH_RATIO,
        "stages_median_ms": {s: round(statistics.median(v) * 1000, 4) for s, v in stages.items()},
        "python": sys.version.split()[0],
        "load_average_1m": round(os.getloadavg()[0], 2),
    }


def median_of_runs(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The run whose ratio is the median of `runs` (an odd number), with every run's ratio added: the
    figure is one run's own pair of medians, never a ratio of figures taken from different runs."""
    ordered = sorted(runs, key=lambda r: r["ratio_vs_prometheus_client"])
    ratios = [r["ratio_vs_prometheus_client"] for r in runs]
    return {
        **ordered[len(ordered) // 2],
        "runs": ratios,
        "ratio_min": min(ratios),
        "ratio_max": max(ratios),
    }


def readme_row(r: dict[str, Any]) -> str:
    """The README's performance row, written from a result of this benchmark (never typed)."""
    spread = f"median of {len(r['runs'])} runs, {r['ratio_min']:.1f}–{r['ratio_max']:.1f}×; " if "runs" in r else ""
    return (
        f"| {r['capture']} ({r['body_bytes']:,} bytes, {r['samples']} samples), Python {r['python']} "
        f"| {r['pipeline_median_ms']:.3f} ms | {r['prometheus_client_parse_median_ms']:.2f} ms "
        f"| **{r['ratio_vs_prometheus_client']:.1f}×** ({spread}target ≥ {r['target_ratio']}×) |"
    )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--record", action="store_true", help=f"also write the result to {RECORDED}")
    ap.add_argument("--readme", action="store_true", help=f"print the README row of {RECORDED} (no run)")
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--runs", type=int, default=5, help="runs in this process; the median one is reported")
    args = ap.parse_args()
    if args.readme:
        print(readme_row(json.loads(RECORDED.read_text(encoding="utf-8"))))
        return 0
    if args.runs < 1 or args.runs % 2 == 0:
        ap.error("--runs must be odd (the median run is one of them)")
    result = median_of_runs([measure(args.rounds, args.reps) for _ in range(args.runs)])
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

"""The null false-decision rate of `check` with early stopping, per level and per run, from the burst models.

`check` stops a level at the first look that decides (canary/cycle/sequential.py: looks from 5 counted bursts a
path to the last, the error spent over them). With no effect, how often does a level decide, and a run decide
any level (levels 1,4,16, the run's 5 % split over them)? Beside each, the same looks with every look tested at
the level's full confidence ("peeking", the uncorrected design). Each rate with its Wilson 95 % interval, and the
look a clear effect (the 32B calibration's shape, ΔTTFT -470 ms) and a 20 ms effect stop at.

    python bench/sequential_null.py [--runs 2000] [--last 10]
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kvoffload_exporter.canary.cycle.sequential import Design
from tests.support.burst_models import MODELS, Rate, sequential_decided, sequential_run_decided

LEVELS = (1, 4, 16)


def _pct(r: Rate) -> str:
    lo, hi = r.wilson
    return f"{r.k}/{r.n} = {r.rate:.1%} [{lo:.1%}, {hi:.1%}]"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0], allow_abbrev=False)
    ap.add_argument("--runs", type=int, default=2000)
    ap.add_argument("--last", type=int, default=10, help="the last look (check --rounds / --min-bursts)")
    args = ap.parse_args()
    d = Design.up_to(args.last)
    print(
        "look confidences at α = 5 %:",
        ", ".join(f"n={n}: {d.confidence_at(n):.4f}" for n in range(d.first, d.last + 1)),
    )
    print()
    print("| model | c | one level at 5 %, sequential [Wilson 95 %] | same looks, peeking at 95 % |")
    print("|---|---|---|---|")
    for model in sorted(MODELS):
        for c in LEVELS:
            seq, _ = sequential_decided(model, c, d, 0.0, args.runs, seed=100 * c + len(model))
            peek, _ = sequential_decided(model, c, d, 0.0, args.runs, seed=100 * c + len(model), peek=True)
            print(f"| {model} | {c} | {_pct(seq)} | {_pct(peek)} |")
    print()
    print("| model | per run (levels 1,4,16; 5 % split) | per level c=1 / c=4 / c=16 | per run, peeking |")
    print("|---|---|---|---|")
    for model in sorted(MODELS):
        run, per = sequential_run_decided(model, LEVELS, args.last, args.runs, seed=7 + len(model))
        prun, _ = sequential_run_decided(model, LEVELS, args.last, args.runs, seed=7 + len(model), peek=True)
        levels = " / ".join(f"{per[c].rate:.1%}" for c in LEVELS)
        print(f"| {model} | {_pct(run)} | {levels} | {_pct(prun)} |")
    print()
    print("| effect | model, c | decided with its sign | stopped at look (counts) |")
    print("|---|---|---|---|")
    for effect, model, c in (
        (-0.470, "gaussian", 1),
        (0.020, "gaussian", 1),
        (0.020, "gaussian", 4),
        (0.007, "queued", 4),
    ):
        r, stops = sequential_decided(model, c, d, effect, min(args.runs, 1000), seed=11 + c)
        hist = ", ".join(f"{n}: {k}" for n, k in sorted(Counter(stops).items()))
        print(f"| {effect * 1e3:+.0f} ms | {model}, c={c} | {_pct(r)} | {hist} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The interval's level and power per burst model, as a table for docs/canary.md.

Synthetic levels with a known truth (tests/support/burst_models.py: Gaussian random effects, queued bursts
whose TTFT steps with queue position, heavy tails with stalls), decided by `check`'s own `cluster_delta`
at 95 %: how often a level with no effect is decided (false rate), and how often an effect of two
within-burst spreads (20 ms; one 7 ms queue step for the queued model) is decided with its sign (power).
Each rate with its Wilson 95 % interval; the pooled-median bootstrap it replaced beside it for the null.

    python bench/coverage_table.py [--runs 1000] [--power-runs 400]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.support.burst_models import MODELS, SPREAD, Rate, decided, decided_by_pooled_bootstrap

LEVELS, BURSTS = (1, 4, 8, 16, 32), (3, 5, 10, 20)


def _pct(r: Rate) -> str:
    lo, hi = r.wilson
    return f"{r.rate:.1%} [{lo:.1%}, {hi:.1%}]"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0], allow_abbrev=False)
    ap.add_argument("--runs", type=int, default=1000)
    ap.add_argument("--power-runs", type=int, default=400)
    ap.add_argument("--old-runs", type=int, default=300, help="runs of the pooled-median bootstrap (slow)")
    args = ap.parse_args()
    print("| model | c | bursts a path | false rate, no effect [Wilson 95 %] | power, effect with its sign |")
    print("|---|---|---|---|---|")
    for model in sorted(MODELS):
        effect = 0.007 if model == "queued" else 2 * SPREAD
        for c in LEVELS:
            for b in BURSTS:
                null = decided(model, c, b, 0.0, args.runs, seed=1000 * c + b)
                power = decided(model, c, b, effect, args.power_runs, seed=2000 * c + b)
                print(f"| {model} | {c} | {b} | {_pct(null)} | {_pct(power)} at +{effect * 1e3:.0f} ms |")
    print()
    print("| model | c | bursts | pooled-median bootstrap, false rate [Wilson 95 %] |")
    print("|---|---|---|---|")
    for model, c, b in (("queued", 4, 10), ("queued", 4, 5), ("queued", 16, 10), ("gaussian", 4, 10)):
        print(f"| {model} | {c} | {b} | {_pct(decided_by_pooled_bootstrap(model, c, b, args.old_runs, seed=3))} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""`check` stops when decided and keeps its confidence: the group-sequential design (canary/cycle/sequential.py).

With no effect, a level looked at after every counted sample from 5 to 10 may decide in at most 5 % of runs,
and a sweep run (levels 1,4,16) in at most 5 %. The looks go through what `check` itself calls (`decide` with
the design for the rounds, `Level.decided`/`entry` for the sweep), so a change that tests every look at the
level's full confidence again ("peeking", ~10 % here) fails these tests; the last test shows the measurement
can fail for that reason. Seeds are fixed, so a run is reproducible.
"""

from __future__ import annotations

import math
import random

from kvoffload_exporter.canary.check.sweepreport import Level, entry
from kvoffload_exporter.canary.cycle.sequential import FIRST_LOOK, Design
from kvoffload_exporter.canary.cycle.shift import _cdf
from kvoffload_exporter.canary.cycle.stats import decide, wilson
from tests.support.burst_models import MODELS, sequential_decided, sequential_run_decided

RUNS = 600
DECIDED = ("offload_faster", "offload_slower")


def _within_five_percent(k: int, n: int) -> None:
    low, high = wilson(k, n, z=3.0)
    assert k / n <= 0.05 and low <= 0.05, f"{k}/{n} decided with no effect, Wilson(z=3) [{low:.3f}, {high:.3f}]"


def test_the_shares_of_the_looks_add_up_to_alpha_and_the_first_can_decide():
    for last, alpha in ((10, 0.05), (20, 0.05), (10, 0.05 / 3), (5, 0.05), (1, 0.05)):
        d = Design.up_to(last, alpha)
        shares = [d.alpha_at(n) for n in range(1, last + 1)]
        assert all(s >= 0 for s in shares) and math.isclose(sum(shares), alpha)
        assert d.first == min(FIRST_LOOK, last) and d.alpha_at(d.first) > 0
    # 5 against 5 fully separated (U = 0) has a two-sided p of 2/252: the default first look can decide on it
    assert Design.up_to(10).alpha_at(FIRST_LOOK) >= 2 * _cdf(5, 5)[0]


def _rounds_run(rng: random.Random, design: Design, shift: float = 0.0) -> tuple[str, int]:
    """One `check` rounds phase with no effect: a sample per path per round, `decide` after each round, stop
    at the first decided verdict (as checkrun._rounds does)."""
    hits: list[float] = []
    ctl: list[float] = []
    for n in range(1, design.last + 1):
        hits.append(0.1 + shift + rng.gauss(0, 0.01))
        ctl.append(0.1 + rng.gauss(0, 0.01))
        v = decide({"offload_hit": hits, "recompute": ctl}, n, design=design)
        if v.verdict in DECIDED:
            return v.verdict, n
    return v.verdict, design.last


def test_rounds_stopped_early_decide_a_null_effect_in_at_most_five_percent():
    rng, design = random.Random(48), Design.up_to(10)
    k = sum(_rounds_run(rng, design)[0] in DECIDED for _ in range(RUNS))
    _within_five_percent(k, RUNS)


def test_a_clear_effect_stops_at_the_first_look_with_the_looks_interval():
    rng, design = random.Random(5), Design.up_to(10)
    verdict, n = _rounds_run(rng, design, shift=-0.470)  # the 32B calibration's ΔTTFT
    assert (verdict, n) == ("offload_faster", FIRST_LOOK)
    v = decide(
        {"offload_hit": [0.1 - 0.47 + i * 1e-3 for i in range(7)], "recompute": [0.1 + i * 1e-3 for i in range(7)]},
        7,
        design=design,
    )
    assert v.primary is not None and v.primary.n_offload == 7  # look 7 sees its own 7 samples a path
    assert math.isclose(v.primary.confidence, design.confidence_at(7))


def test_sweep_levels_stopped_early_decide_a_null_effect_in_at_most_five_percent():
    """Through Level.decided and entry(): queued bursts at c = 16, the level's share of a 3-level run."""
    rng, model = random.Random(16), MODELS["queued"]
    design, k = Design.up_to(10, alpha=0.05), 0
    for _ in range(RUNS // 2):
        lv = Level(16, 1024, "recompute", design=design)
        while not lv.decided and min(len(lv.offload_bursts), len(lv.control_bursts)) < design.last:
            lv.offload_bursts.append(model(rng, 16, 0.0))
            lv.control_bursts.append(model(rng, 16, 0.0))
        k += entry(lv, design.last, n_boot=0)["verdict"] in DECIDED
    _within_five_percent(k, RUNS // 2)


def test_per_level_and_per_run_with_the_burst_models():
    for model in sorted(MODELS):
        r, _ = sequential_decided(model, 4, Design.up_to(10), 0.0, RUNS, seed=len(model))
        _within_five_percent(r.k, r.n)
        run, _ = sequential_run_decided(model, (1, 4, 16), 10, RUNS // 2, seed=3 * len(model))
        _within_five_percent(run.k, run.n)


def test_the_measurement_fails_peeking_without_correction():
    """The failure this design exists for: every look at 95 % decides a null effect about twice as often."""
    r, _ = sequential_decided("gaussian", 1, Design.up_to(10), 0.0, RUNS, seed=1, peek=True)
    assert wilson(r.k, r.n, z=3.0)[0] > 0.05, f"{r.k}/{r.n}"

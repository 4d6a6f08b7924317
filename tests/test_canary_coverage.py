"""The interval's level and power, measured per burst model: synthetic levels with a known truth.

Each cell draws many `check` levels from one burst model (tests/support/burst_models.py: Gaussian random
effects, queued bursts whose TTFT steps with queue position, heavy tails with stalls) at c = 1…32 and 3…20
bursts a path. With no effect a 95 % interval may exclude 0 in at most 5 % of levels: a cell fails when the
Wilson interval of its observed rate (z = 3, as 60 cells are judged at once) lies wholly above 5 %. With an
effect, the decision must come with the right sign in at least 80 % of levels (Wilson interval wholly above
80 %) where docs/canary.md claims it. Seeds are fixed per cell, so a run is reproducible.
The method this replaced (median of pooled requests, bursts resampled) decides a null effect in ~12 % of
queued levels at c = 4: the last test shows this table can fail for the reason it exists.
"""

from __future__ import annotations

import itertools
import math
import zlib

import pytest

from kvoffload_exporter.canary.cycle.shift import _cdf, burst_medians, shift
from kvoffload_exporter.canary.cycle.stats import MIN_BURSTS_CI, cluster_delta, delta_estimate, wilson
from tests.support.burst_models import MODELS, SPREAD, decided, decided_by_pooled_bootstrap

NULL_RUNS, POWER_RUNS = 400, 300
NULL_CELLS = list(itertools.product(sorted(MODELS), (1, 4, 8, 16, 32), (3, 5, 10, 20)))
POWER_CELLS = [
    *[("gaussian", c, 10, s * 2 * SPREAD) for c in (4, 8, 16, 32) for s in (1, -1)],
    ("gaussian", 1, 20, 2 * SPREAD),
    *[("queued", c, 10, s * 0.007) for c in (1, 4, 8) for s in (1, -1)],  # one queue step, ~ +7 ms
    *[("heavy", c, 20, 2 * SPREAD) for c in (4, 8, 16, 32)],
]


@pytest.mark.parametrize("model,c,bursts", NULL_CELLS)
def test_no_effect_decides_at_most_five_percent_of_levels(model: str, c: int, bursts: int) -> None:
    r = decided(model, c, bursts, 0.0, NULL_RUNS, seed=zlib.crc32(f"{model}/{c}/{bursts}".encode()))
    low, high = wilson(r.k, r.n, z=3.0)
    assert low <= 0.05, f"{model} c={c} bursts={bursts}: {r.k}/{r.n} decided, Wilson [{low:.3f}, {high:.3f}]"


@pytest.mark.parametrize("model,c,bursts,effect", POWER_CELLS)
def test_an_effect_is_found_with_its_sign(model: str, c: int, bursts: int, effect: float) -> None:
    r = decided(model, c, bursts, effect, POWER_RUNS, seed=7 + c + bursts)
    low, high = r.wilson
    assert low >= 0.80, f"{model} c={c} bursts={bursts} {effect * 1e3:+.0f} ms: {r.k}/{r.n} [{low:.3f}, {high:.3f}]"


def test_the_table_fails_the_pooled_median_bootstrap_on_queued_bursts() -> None:
    """The failure this module exists for: queued bursts make the pooled median an order statistic."""
    r = decided_by_pooled_bootstrap("queued", 4, 10, 300, seed=13)
    assert r.wilson[0] > 0.05, f"{r.k}/{r.n}"


def test_the_exact_null_distribution_is_the_counted_one() -> None:
    for n, m in ((1, 1), (2, 3), (3, 3), (4, 5), (6, 4)):
        counts = [0] * (n * m + 1)
        for pos in itertools.combinations(range(n + m), n):
            counts[sum(sum(1 for r in range(p) if r not in pos) for p in pos)] += 1
        cum = list(itertools.accumulate(counts))
        assert _cdf(n, m) == pytest.approx([c / math.comb(n + m, n) for c in cum])


def test_the_interval_excludes_zero_exactly_when_the_test_rejects() -> None:
    a, b = [0.12, 0.13, 0.11, 0.14, 0.125], [0.10, 0.09, 0.105, 0.1, 0.095]
    s = shift(a, b)
    assert s.low is not None and s.low > 0 and s.p_value <= 0.05
    s = shift([0.1, 0.12, 0.09, 0.11, 0.1], [0.1, 0.11, 0.095, 0.105, 0.1])
    assert s.low is not None and s.high is not None and s.low <= 0 <= s.high and s.p_value > 0.05


def test_no_interval_under_three_bursts_or_out_of_reach() -> None:
    two = [[0.1, 0.11], [0.12]]
    est = cluster_delta(two, [[0.09], [0.1], [0.095]])
    assert est.low is None and est.high is None and est.delta is not None
    assert est.bursts_offload == 2 < MIN_BURSTS_CI and est.n_offload == 3
    assert cluster_delta([], [[0.1]]).delta is None
    three = cluster_delta([[0.2], [0.21], [0.22]], [[0.1], [0.11], [0.12]])  # 3 v 3 reaches 90 % at most
    assert three.low is None and three.delta == pytest.approx(0.1)


def test_a_burst_is_one_observation_its_median() -> None:
    assert burst_medians([[0.3, 0.1, 0.2], [0.4, 0.1], [0.5]]) == [0.2, 0.25, 0.5]
    queued = [[0.012, 0.019, 0.034, 0.041]] * 3
    est = cluster_delta(queued, queued, n_boot=0)
    assert est.delta == 0.0


def test_a_round_is_a_burst_of_one() -> None:
    a, b = [0.12, 0.13, 0.11, 0.14, 0.125], [0.10, 0.09, 0.105, 0.1, 0.095]
    est = cluster_delta([[x] for x in a], [[x] for x in b], seed=0)
    flat = delta_estimate(a, b)
    assert (est.delta, est.low, est.high) == (flat.delta, flat.lower, flat.upper)


def test_non_finite_ttft_is_refused() -> None:
    with pytest.raises(ValueError):
        cluster_delta([[float("nan")]], [[0.1]])


def test_wilson_interval() -> None:
    assert wilson(0, 0) == (0.0, 1.0)
    low, high = wilson(9, 55)
    assert (round(low, 3), round(high, 3)) == (0.089, 0.283)  # the c = 4 figure this method replaced

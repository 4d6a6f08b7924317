"""The interval's coverage, measured: synthetic experiments with correlated bursts and a known truth.

Each path gets 10 bursts of 4 requests; a burst shares a random effect as large as the within-burst spread
(requests of one burst share a queue and a scheduler step). Under the null (no true difference) a 95 %
interval may exclude 0 in at most 8 % of experiments; with a true effect of two within-burst spreads it must
exclude 0 in at least 80 %. Resampling requests as if independent fails the first assertion (about 14 %
false verdicts, ../docs/canary.md), which is why `cluster_delta` resamples bursts.
"""

from __future__ import annotations

import random

import pytest

from kvoffload_exporter.canary.stats import MIN_BURSTS_CI, bootstrap_delta, cluster_delta

EXPERIMENTS = 1000
BURSTS, PER_BURST = 10, 4
SPREAD = 0.010  # within-burst standard deviation, seconds (H200 TTFT noise is ±10–15 ms)
N_BOOT = 400  # per experiment: enough for a 95 % percentile interval's ends at this sample size


def _path(rng: random.Random, shift: float) -> list[list[float]]:
    out = []
    for _ in range(BURSTS):
        burst_effect = rng.gauss(0.0, SPREAD)  # as large as the within-burst spread
        out.append([0.100 + shift + burst_effect + rng.gauss(0.0, SPREAD) for _ in range(PER_BURST)])
    return out


def _exclusion_rate(shift: float, seed: int) -> float:
    rng = random.Random(seed)
    excluded = 0
    for i in range(EXPERIMENTS):
        est = cluster_delta(_path(rng, shift), _path(rng, 0.0), n_boot=N_BOOT, seed=i)
        assert est.bursts_offload == BURSTS and est.n_offload == BURSTS * PER_BURST
        excluded += est.excludes_zero
    return excluded / EXPERIMENTS


def test_null_experiments_rarely_exclude_zero() -> None:
    assert _exclusion_rate(0.0, seed=11) <= 0.08


def test_an_effect_of_two_spreads_is_found() -> None:
    assert _exclusion_rate(2 * SPREAD, seed=12) >= 0.80


def test_request_level_resampling_of_the_same_bursts_errs_more_often() -> None:
    """The failure this module exists for: pooled requests resampled as independent are too narrow."""
    rng = random.Random(13)
    wrong = 0
    for i in range(300):
        a, b = _path(rng, 0.0), _path(rng, 0.0)
        flat = bootstrap_delta([x for y in a for x in y], [x for y in b for x in y], n_boot=N_BOOT, seed=i)
        wrong += flat.excludes_zero
    assert wrong / 300 > 0.08


def test_no_interval_under_three_bursts_a_side() -> None:
    two = [[0.1, 0.11], [0.12]]
    est = cluster_delta(two, [[0.09], [0.1], [0.095]])
    assert est.low is None and est.high is None and est.delta is not None
    assert est.bursts_offload == 2 < MIN_BURSTS_CI and est.n_offload == 3
    assert cluster_delta([], [[0.1]]).delta is None


def test_a_round_is_a_burst_of_one() -> None:
    a, b = [0.12, 0.13, 0.11, 0.14], [0.10, 0.09, 0.105, 0.1]
    est = cluster_delta([[x] for x in a], [[x] for x in b], seed=0)
    flat = bootstrap_delta(a, b, seed=0)
    assert (est.delta, est.low, est.high) == (flat.delta, flat.lower, flat.upper)


def test_non_finite_ttft_is_refused() -> None:
    with pytest.raises(ValueError):
        cluster_delta([[float("nan")]], [[0.1]])

"""Canary statistics: quantiles, the rank-sum estimate and the verdict rules."""

from __future__ import annotations

import random

import pytest

from kvoffload_exporter.canary.cycle.stats import decide, delta_estimate, median, quantile, summarize


def test_quantile_matches_linear_interpolation() -> None:
    xs = [4.0, 1.0, 3.0, 2.0]
    assert quantile(xs, 0.0) == 1.0
    assert quantile(xs, 1.0) == 4.0
    assert median(xs) == 2.5
    assert quantile(xs, 0.25) == pytest.approx(1.75)
    assert quantile([7.0], 0.75) == 7.0
    with pytest.raises(ValueError):
        quantile([], 0.5)


def test_summarize() -> None:
    s = summarize([0.03, 0.01, 0.02])
    assert s is not None and (s.n, s.median, s.min, s.max) == (3, 0.02, 0.01, 0.03)
    assert summarize([]) is None


def _noisy(center: float, n: int, seed: int, spread: float = 0.01) -> list[float]:
    r = random.Random(seed)
    return [center + r.uniform(-spread, spread) for _ in range(n)]


def test_estimate_is_deterministic_and_brackets_the_shift() -> None:
    a, b = _noisy(0.062, 10, 1), _noisy(0.034, 10, 2)
    e1 = delta_estimate(a, b, "control_target")
    assert e1 == delta_estimate(a, b, "control_target")
    assert e1.lower <= e1.delta <= e1.upper
    pairwise = sorted(x - y for x in a for y in b)  # Hodges-Lehmann: the median pairwise difference
    assert e1.delta == pytest.approx(median(pairwise))
    assert abs(e1.delta - (median(a) - median(b))) < 0.005
    assert e1.excludes_zero and e1.lower > 0


def test_a_wider_confidence_gives_a_wider_interval() -> None:
    a, b = _noisy(0.062, 10, 1), _noisy(0.034, 10, 2)
    e95, e99 = delta_estimate(a, b, confidence=0.95), delta_estimate(a, b, confidence=0.99)
    assert e99.lower <= e95.lower and e99.upper >= e95.upper


def test_verdict_offload_slower_like_the_0_6b_run() -> None:
    v = decide({"offload_hit": _noisy(0.0619, 10, 1), "control_target": _noisy(0.0342, 10, 2)}, 10)
    assert v.verdict == "offload_slower" and v.control == "control_target"
    assert v.primary is not None and v.primary.lower > 0


def test_verdict_offload_faster_like_the_32b_run() -> None:
    v = decide(
        {"offload_hit": _noisy(0.088, 10, 1), "recompute": _noisy(0.634, 10, 2), "cold": _noisy(0.649, 20, 3)}, 10
    )
    assert v.verdict == "offload_faster"
    assert v.control == "recompute"  # preferred over cold when both have enough samples
    assert set(v.estimates) == {"recompute", "cold"}


def test_overlapping_samples_are_inconclusive() -> None:
    v = decide({"offload_hit": _noisy(0.05, 12, 1, 0.02), "cold": _noisy(0.05, 12, 2, 0.02)}, 12)
    assert v.verdict == "inconclusive"
    assert v.primary is not None and v.primary.lower <= 0 <= v.primary.upper


def test_too_few_samples_are_inconclusive_even_when_far_apart() -> None:
    v = decide({"offload_hit": [0.06] * 9, "cold": [0.03] * 20}, 9)
    assert v.verdict == "inconclusive" and "9" in v.why
    v = decide({"offload_hit": [0.06] * 10, "cold": [0.03] * 9}, 10)
    assert v.verdict == "inconclusive" and v.control is None


def test_control_with_too_few_samples_falls_back_to_the_next() -> None:
    v = decide({"offload_hit": _noisy(0.06, 10, 1), "recompute": [0.03] * 3, "cold": _noisy(0.04, 10, 2)}, 10)
    assert v.control == "cold" and v.verdict == "offload_slower"


def test_no_offload_hit_needs_attempts() -> None:
    assert decide({"cold": [0.04] * 10}, 3).verdict == "no_offload_hit"
    assert decide({"cold": [0.04] * 10}, 2).verdict == "inconclusive"
    assert decide({}, 0).verdict == "inconclusive"

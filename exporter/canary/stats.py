"""Canary statistics: quantiles, bootstrap confidence interval of ΔTTFT, and the verdict.

Pure and deterministic: the bootstrap uses its own seeded `random.Random`, so the same samples always
give the same interval. A verdict other than `inconclusive` needs enough samples on both sides and an
interval that excludes zero; TTFT noise on a real H200 was ±10–15 ms p25–p75 for identical requests,
so single comparisons mean nothing.
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

MIN_CI_SAMPLES = 3
"""No bootstrap interval from fewer samples on either side: resampling 2 values gives 3 distinct medians."""

CONTROL_ORDER = ("recompute", "control_target", "cold")
"""Preferred control first: the same prefix with loads disabled is the cleanest comparison, then the
same request on a server without the connector, then a cold (freshly salted) request."""


def quantile(xs: Sequence[float], q: float) -> float:
    """Linear-interpolation quantile (numpy's default, type 7). `xs` must be non-empty."""
    if not xs:
        raise ValueError("quantile of no samples")
    s = sorted(xs)
    pos = (len(s) - 1) * q
    lo = math.floor(pos)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


def median(xs: Sequence[float]) -> float:
    return quantile(xs, 0.5)


@dataclass(frozen=True)
class Summary:
    n: int
    median: float
    p25: float
    p75: float
    min: float
    max: float


def summarize(xs: Sequence[float]) -> Summary | None:
    if not xs:
        return None
    return Summary(len(xs), median(xs), quantile(xs, 0.25), quantile(xs, 0.75), min(xs), max(xs))


@dataclass(frozen=True)
class DeltaEstimate:
    """median(offload_hit) − median(control) with a percentile-bootstrap interval (seconds)."""

    control: str
    delta: float
    lower: float
    upper: float
    n_offload: int
    n_control: int
    confidence: float

    @property
    def excludes_zero(self) -> bool:
        return self.lower > 0 or self.upper < 0


def bootstrap_delta(
    offload: Sequence[float],
    control: Sequence[float],
    control_name: str = "control",
    *,
    seed: int = 0,
    n_boot: int = 2000,
    confidence: float = 0.95,
) -> DeltaEstimate:
    """Resample both groups independently with replacement; the interval is the central `confidence`
    share of the resampled median differences."""
    if not offload or not control:
        raise ValueError("bootstrap needs samples on both sides")
    rng = random.Random(seed)
    a, b = list(offload), list(control)
    diffs = []
    for _ in range(n_boot):
        ra = [a[rng.randrange(len(a))] for _ in a]
        rb = [b[rng.randrange(len(b))] for _ in b]
        diffs.append(median(ra) - median(rb))
    alpha = (1.0 - confidence) / 2.0
    return DeltaEstimate(
        control_name,
        median(a) - median(b),
        quantile(diffs, alpha),
        quantile(diffs, 1 - alpha),
        len(a),
        len(b),
        confidence,
    )


@dataclass(frozen=True)
class Verdict:
    verdict: str  # one of catalogue.CANARY_VERDICTS
    control: str | None  # the control the verdict was decided against
    why: str
    estimates: Mapping[str, DeltaEstimate] = field(default_factory=dict)

    @property
    def primary(self) -> DeltaEstimate | None:
        return self.estimates.get(self.control) if self.control else None


def decide(
    samples: Mapping[str, Sequence[float]],
    offload_attempts: int,
    *,
    min_samples: int = 10,
    seed: int = 0,
    n_boot: int = 2000,
    confidence: float = 0.95,
) -> Verdict:
    """Verdict from TTFT samples per path (`offload_hit` plus the control paths).

    `offload_attempts` counts revisits that should have been served by the tier (displaced, no error):
    zero hits out of at least three such attempts is `no_offload_hit`, fewer attempts say nothing.
    """
    hits = list(samples.get("offload_hit", ()))
    estimates: dict[str, DeltaEstimate] = {}
    for name in CONTROL_ORDER:
        ctl = list(samples.get(name, ()))
        if len(hits) >= MIN_CI_SAMPLES and len(ctl) >= MIN_CI_SAMPLES:  # no interval from 1 or 2 samples
            estimates[name] = bootstrap_delta(hits, ctl, name, seed=seed, n_boot=n_boot, confidence=confidence)
    if not hits:
        if offload_attempts >= 3:
            return Verdict(
                "no_offload_hit", None, f"0 offload hits in {offload_attempts} displaced revisits", estimates
            )
        return Verdict("inconclusive", None, f"only {offload_attempts} displaced revisits so far", estimates)
    if len(hits) < min_samples:
        return Verdict("inconclusive", None, f"{len(hits)} offload-hit samples < {min_samples}", estimates)
    control = next((c for c in CONTROL_ORDER if c in estimates and estimates[c].n_control >= min_samples), None)
    if control is None:
        return Verdict("inconclusive", None, f"no control path has {min_samples} samples", estimates)
    est = estimates[control]
    pct = round(confidence * 100)
    ci = f"{est.delta * 1000:+.1f} ms, {pct}% CI [{est.lower * 1000:+.1f}, {est.upper * 1000:+.1f}] ms"
    if est.lower > 0:
        return Verdict("offload_slower", control, f"offload hit slower than {control}: {ci}", estimates)
    if est.upper < 0:
        return Verdict("offload_faster", control, f"offload hit faster than {control}: {ci}", estimates)
    return Verdict("inconclusive", control, f"interval includes zero vs {control}: {ci}", estimates)

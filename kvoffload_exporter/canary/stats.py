"""Canary statistics: quantiles, bootstrap confidence interval of ΔTTFT, and the verdict.

Pure and deterministic: the bootstrap uses its own seeded `random.Random`, so the same samples always
give the same interval. A verdict other than `inconclusive` needs enough samples on both sides and an
interval that excludes zero; TTFT noise on a real H200 was ±10–15 ms p25–p75 for identical requests,
so single comparisons mean nothing.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

CONTROL_ORDER = ("recompute", "control_target", "cold")
"""Preferred control first: the same prefix with loads disabled is the cleanest comparison, then the
same request on a server without the connector, then a cold (freshly salted) request."""


def quantile(xs: Sequence[float], q: float) -> float:
    """Linear-interpolation quantile (numpy's default, type 7). `xs` must be non-empty."""
    if not xs:
        raise ValueError("quantile of no samples")
    return _sorted_q(sorted(xs), q)


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


MIN_BURSTS_CI = 3
"""No interval from fewer bursts on either side: at 3 single-request bursts the percentile interval of a
median difference is exactly [min(a) - max(b), max(a) - min(b)] and already errs ~10 % under the null."""

METHOD = (
    "cluster percentile bootstrap: bursts resampled with their requests within each path; "
    "statistic = median (and p90) of the pooled drawn requests"
)


@dataclass(frozen=True)
class ClusterDelta:
    """ΔTTFT = median(offload) − median(control) over pooled requests, with a burst-level interval (seconds).

    `low`/`high` are None under MIN_BURSTS_CI bursts a side; `delta` is None when a side is empty. The same
    resamples give the Δp90 interval (`p90_*`)."""

    delta: float | None
    low: float | None
    high: float | None
    bursts_offload: int
    bursts_control: int
    n_offload: int = 0
    n_control: int = 0
    confidence: float = 0.95
    p90_delta: float | None = None
    p90_low: float | None = None
    p90_high: float | None = None

    @property
    def has_interval(self) -> bool:
        return self.low is not None and self.high is not None

    @property
    def excludes_zero(self) -> bool:
        return self.low is not None and self.high is not None and (self.low > 0 or self.high < 0)


def _bursts(raw: Sequence[Sequence[float]], side: str) -> list[list[float]]:
    out = []
    for burst in raw:
        xs = [float(x) for x in burst]
        if any(x - x != 0.0 for x in xs):
            raise ValueError(f"non-finite TTFT in the {side} bursts")
        if xs:
            out.append(sorted(xs))
    return out


def _pooled_q(bursts: Sequence[Sequence[float]], q: float) -> float:
    return quantile([x for b in bursts for x in b], q)


def cluster_delta(
    offload: Sequence[Sequence[float]],
    control: Sequence[Sequence[float]],
    *,
    confidence: float = 0.95,
    n_boot: int = 2000,
    seed: int | None = None,
) -> ClusterDelta:
    """Burst-level (cluster) percentile bootstrap of the ΔTTFT median and p90.

    Requests of one concurrent burst share a scheduler step and a queue: they are one observation, so
    whole bursts are resampled (with replacement, within each path) and the statistic is the quantile of
    the pooled requests of the drawn bursts. An ordinary canary round is a burst of one, where this is the
    plain bootstrap of a median difference. Empty bursts are ignored; `seed` None draws a fresh seed.
    Coverage is measured, not assumed: tests/test_canary_coverage.py, docs/canary.md."""
    a, b = _bursts(offload, "offload"), _bursts(control, "control")
    na, nb = sum(map(len, a)), sum(map(len, b))
    if not a or not b:
        return ClusterDelta(None, None, None, len(a), len(b), na, nb, confidence)
    delta = _pooled_q(a, 0.5) - _pooled_q(b, 0.5)
    d90 = _pooled_q(a, 0.9) - _pooled_q(b, 0.9)
    if len(a) < MIN_BURSTS_CI or len(b) < MIN_BURSTS_CI:
        return ClusterDelta(delta, None, None, len(a), len(b), na, nb, confidence, d90)
    rng = random.Random(seed)
    meds: list[float] = []
    p90s: list[float] = []
    for _ in range(n_boot):
        ra = sorted([x for burst in rng.choices(a, k=len(a)) for x in burst])
        rb = sorted([x for burst in rng.choices(b, k=len(b)) for x in burst])
        meds.append(_sorted_q(ra, 0.5) - _sorted_q(rb, 0.5))
        p90s.append(_sorted_q(ra, 0.9) - _sorted_q(rb, 0.9))
    alpha = (1.0 - confidence) / 2.0
    return ClusterDelta(
        delta,
        quantile(meds, alpha),
        quantile(meds, 1 - alpha),
        len(a),
        len(b),
        na,
        nb,
        confidence,
        d90,
        quantile(p90s, alpha),
        quantile(p90s, 1 - alpha),
    )


def _sorted_q(s: Sequence[float], q: float) -> float:
    """`quantile` of an already sorted, non-empty sequence (the bootstrap's inner loop sorts once)."""
    pos = (len(s) - 1) * q
    lo = int(pos)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


@dataclass(frozen=True)
class DeltaEstimate:
    """One control's ΔTTFT for the verdict: `cluster_delta` over the rounds (each round a burst of one)."""

    control: str
    delta: float
    lower: float
    upper: float
    n_offload: int
    n_control: int
    confidence: float
    bursts_offload: int = 0
    bursts_control: int = 0

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
    """Independent samples (each a burst of one) through `cluster_delta`; ValueError under 3 a side."""
    est = cluster_delta([[x] for x in offload], [[x] for x in control], confidence=confidence, n_boot=n_boot, seed=seed)
    if est.delta is None or est.low is None or est.high is None:
        raise ValueError(f"an interval needs {MIN_BURSTS_CI} samples on both sides")
    return DeltaEstimate(
        control_name,
        est.delta,
        est.low,
        est.high,
        est.n_offload,
        est.n_control,
        confidence,
        est.bursts_offload,
        est.bursts_control,
    )


@dataclass(frozen=True)
class Verdict:
    verdict: str  # one of catalogue.CANARY_VERDICTS
    control: str | None  # the control the verdict was decided against
    why: str
    estimates: Mapping[str, DeltaEstimate] = field(default_factory=dict)
    short: bool = False  # inconclusive for want of counted samples (more rounds would help)

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
        if len(hits) >= MIN_BURSTS_CI and len(ctl) >= MIN_BURSTS_CI:  # no interval from 1 or 2 samples
            estimates[name] = bootstrap_delta(hits, ctl, name, seed=seed, n_boot=n_boot, confidence=confidence)
    if not hits:
        if offload_attempts >= 3:
            return Verdict(
                "no_offload_hit", None, f"0 offload hits in {offload_attempts} displaced revisits", estimates
            )
        return Verdict("inconclusive", None, f"only {offload_attempts} displaced revisits so far", estimates, True)
    if len(hits) < min_samples:
        return Verdict("inconclusive", None, f"{len(hits)} offload-hit samples < {min_samples}", estimates, True)
    control = next((c for c in CONTROL_ORDER if c in estimates and estimates[c].n_control >= min_samples), None)
    if control is None:
        return Verdict("inconclusive", None, f"no control path has {min_samples} samples", estimates, True)
    est = estimates[control]
    pct = round(confidence * 100)
    ci = f"{est.delta * 1000:+.1f} ms, {pct}% CI [{est.lower * 1000:+.1f}, {est.upper * 1000:+.1f}] ms"
    if est.lower > 0:
        return Verdict("offload_slower", control, f"offload hit slower than {control}: {ci}", estimates)
    if est.upper < 0:
        return Verdict("offload_faster", control, f"offload hit faster than {control}: {ci}", estimates)
    return Verdict("inconclusive", control, f"interval includes zero vs {control}: {ci}", estimates)

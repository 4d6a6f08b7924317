"""Canary statistics: quantiles, the burst-level interval of ΔTTFT (canary/cycle/shift.py), and the verdict.

Pure and deterministic: the rank-sum interval has no randomness, and the descriptive Δp90 bootstrap uses
its own seeded `random.Random`, so the same samples always give the same document. A verdict other than
`inconclusive` needs enough samples on both sides and an interval that excludes zero; TTFT noise on a real
H200 was ±10–15 ms p25–p75 for identical requests, so single comparisons mean nothing.
"""

from __future__ import annotations

import contextlib
import math
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from kvoffload_exporter.canary.cycle.sequential import Design
from kvoffload_exporter.canary.cycle.shift import burst_medians, shift

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
"""No interval from fewer bursts on either side. The rank-sum interval reaches 95 % only from 4 bursts a
side (3 against 3 gives at most 90 %), and `check` asks for at least 5 (`--min-bursts`, `--min-samples`)."""

METHOD = (
    "rank-sum over bursts: each burst reduced to its median; delta = Hodges-Lehmann shift of the burst medians "
    "(offload minus control), interval = the exact Wilcoxon-Mann-Whitney (Moses) interval, simultaneous over "
    "the run's levels (Bonferroni); p90 by a cluster bootstrap, descriptive only"
)


@dataclass(frozen=True)
class ClusterDelta:
    """ΔTTFT of one path against another with a burst-level interval (seconds): the Hodges–Lehmann shift of
    the burst medians and its rank-sum interval (canary/cycle/shift.py).

    `low`/`high` are None under MIN_BURSTS_CI bursts a side or when the confidence is out of reach at these
    sizes; `delta` is None when a side is empty. `p_value` is the two-sided rank-sum p-value. Δp90 and its
    interval (`p90_*`) come from a cluster bootstrap and are descriptive: no decision reads them."""

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
    p_value: float | None = None

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


def pooled_bootstrap(
    a: Sequence[Sequence[float]],
    b: Sequence[Sequence[float]],
    q: float,
    confidence: float,
    n_boot: int,
    seed: int | None,
) -> tuple[float, float]:
    """Percentile interval of the difference of the pooled q-quantiles, bursts resampled within each path.

    Kept for Δp90 (descriptive) and as the reference the rank-sum method replaced: for queued bursts its
    median interval decided a null effect in 12–16 % of runs (tests/test_canary_coverage.py)."""
    rng = random.Random(seed)
    out: list[float] = []
    for _ in range(n_boot):
        ra = sorted([x for burst in rng.choices(a, k=len(a)) for x in burst])
        rb = sorted([x for burst in rng.choices(b, k=len(b)) for x in burst])
        out.append(_sorted_q(ra, q) - _sorted_q(rb, q))
    alpha = (1.0 - confidence) / 2.0
    return quantile(out, alpha), quantile(out, 1 - alpha)


def cluster_delta(
    offload: Sequence[Sequence[float]],
    control: Sequence[Sequence[float]],
    *,
    confidence: float = 0.95,
    n_boot: int = 2000,
    seed: int | None = None,
) -> ClusterDelta:
    """Burst-level ΔTTFT: one median per burst, then the rank-sum shift and interval between the paths.

    Requests of one concurrent burst share a scheduler step and a queue: they are one observation. An
    ordinary canary round is a burst of one, where this is the rank-sum interval of the rounds' TTFTs. Empty
    bursts are ignored; `seed` (None: fresh) and `n_boot` shape only the descriptive Δp90 interval.
    Level and power per burst model are measured: tests/test_canary_coverage.py, docs/canary.md."""
    a, b = _bursts(offload, "offload"), _bursts(control, "control")
    na, nb = sum(map(len, a)), sum(map(len, b))
    if not a or not b:
        return ClusterDelta(None, None, None, len(a), len(b), na, nb, confidence)
    sh = shift(burst_medians(a), burst_medians(b), confidence)
    d90 = _pooled_q(a, 0.9) - _pooled_q(b, 0.9)
    if len(a) < MIN_BURSTS_CI or len(b) < MIN_BURSTS_CI:
        return ClusterDelta(sh.delta, None, None, len(a), len(b), na, nb, confidence, d90, p_value=sh.p_value)
    p90_low, p90_high = pooled_bootstrap(a, b, 0.9, confidence, n_boot, seed) if n_boot > 0 else (None, None)
    return ClusterDelta(
        sh.delta, sh.low, sh.high, len(a), len(b), na, nb, confidence, d90, p90_low, p90_high, sh.p_value
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


def delta_estimate(
    offload: Sequence[float],
    control: Sequence[float],
    control_name: str = "control",
    *,
    confidence: float = 0.95,
) -> DeltaEstimate:
    """Independent samples (each a burst of one) through `cluster_delta`; ValueError when no interval at
    `confidence` exists (under 3 a side, or too few for that confidence)."""
    est = cluster_delta([[x] for x in offload], [[x] for x in control], confidence=confidence, n_boot=0)
    if est.delta is None or est.low is None or est.high is None:
        raise ValueError(f"no {confidence:.0%} interval from {len(offload)} against {len(control)} samples")
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
    confidence: float = 0.95,
    design: Design | None = None,
) -> Verdict:
    """Verdict from TTFT samples per path (`offload_hit` plus the control paths).

    `offload_attempts` counts revisits that should have been served by the tier (displaced, no error):
    zero hits out of at least three such attempts is `no_offload_hit`, fewer attempts say nothing.
    With a sequential `design` (check) each comparison is made at its current look: the first n samples of
    both paths at that look's confidence, from the design's first look on (`min_samples` and `confidence`
    give way to it); canary/cycle/sequential.py says why.
    """
    hits = list(samples.get("offload_hit", ()))
    estimates: dict[str, DeltaEstimate] = {}
    for name in CONTROL_ORDER:
        ctl, h, conf = list(samples.get(name, ())), hits, confidence
        if design is not None:
            n = design.look(len(hits), len(ctl))
            ctl, h, conf = ctl[:n], hits[:n], design.confidence_at(n)
        if len(h) >= MIN_BURSTS_CI and len(ctl) >= MIN_BURSTS_CI:  # no interval from 1 or 2 samples
            with contextlib.suppress(ValueError):  # the confidence out of reach at these sizes: no estimate yet
                estimates[name] = delta_estimate(h, ctl, name, confidence=conf)
    if design is not None:
        min_samples = design.first
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
    pct = round(est.confidence * 100, 1 if design is not None else None)
    ci = f"{est.delta * 1000:+.1f} ms, {pct}% CI [{est.lower * 1000:+.1f}, {est.upper * 1000:+.1f}] ms"
    if est.lower > 0:
        return Verdict("offload_slower", control, f"offload hit slower than {control}: {ci}", estimates)
    if est.upper < 0:
        return Verdict("offload_faster", control, f"offload hit faster than {control}: {ci}", estimates)
    return Verdict("inconclusive", control, f"interval includes zero vs {control}: {ci}", estimates)


def wilson(k: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """Wilson score interval of a binomial rate k/n (false-decision rates, power, mismatch rates)."""
    if n == 0:
        return 0.0, 1.0
    p = k / n
    d = 1 + z * z / n
    mid = (p + z * z / (2 * n)) / d
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / d
    return max(0.0, mid - half), min(1.0, mid + half)

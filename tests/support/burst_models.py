"""Synthetic `check` levels with a known truth: bursts shaped like real ones, for measuring an interval's
level (false decisions with no effect) and power (right-sign decisions with one).

A coverage figure is only as good as its burst model, so there are three:
- `gaussian`: a burst shares a random effect as large as the within-burst spread (10 ms);
- `queued`: the c requests of a burst queue behind each other, so TTFT steps with queue position
  (~12 / 19 / 26 / 33 ms at c = 4, as the simulator and a real server show), with small jitter;
- `heavy`: Student-t (3 df) burst effects, log-normal within-burst noise and a 3 % chance of a 150 ms stall.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from dataclasses import dataclass

from kvoffload_exporter.canary.cycle.sequential import Design
from kvoffload_exporter.canary.cycle.stats import cluster_delta, pooled_bootstrap, wilson

SPREAD = 0.010  # the Gaussian model's within-burst standard deviation, seconds
Model = Callable[[random.Random, int, float], list[float]]


def gaussian(rng: random.Random, c: int, shift: float) -> list[float]:
    effect = rng.gauss(0.0, SPREAD)
    return [0.100 + shift + effect + rng.gauss(0.0, SPREAD) for _ in range(c)]


def queued(rng: random.Random, c: int, shift: float) -> list[float]:
    effect, step = rng.gauss(0.0, 0.002), 0.007 + rng.gauss(0.0, 0.0005)
    return [0.012 + shift + effect + step * k + rng.gauss(0.0, 0.0015) for k in range(c)]


def heavy(rng: random.Random, c: int, shift: float) -> list[float]:
    effect = SPREAD * rng.gauss(0.0, 1.0) / math.sqrt(rng.gammavariate(1.5, 1 / 1.5))  # t, 3 df
    stall = 0.150
    return [
        0.100 + shift + effect + SPREAD * rng.lognormvariate(0.0, 1.0) + (stall if rng.random() < 0.03 else 0.0)
        for _ in range(c)
    ]


MODELS: dict[str, Model] = {"gaussian": gaussian, "queued": queued, "heavy": heavy}


@dataclass(frozen=True)
class Rate:
    k: int
    n: int

    @property
    def rate(self) -> float:
        return self.k / self.n

    @property
    def wilson(self) -> tuple[float, float]:
        return wilson(self.k, self.n)


def _level(rng: random.Random, model: Model, c: int, bursts: int, shift: float) -> tuple[list, list]:  # type: ignore[type-arg]
    return [model(rng, c, shift) for _ in range(bursts)], [model(rng, c, 0.0) for _ in range(bursts)]


def decided(model: str, c: int, bursts: int, shift: float, runs: int, seed: int, confidence: float = 0.95) -> Rate:
    """Runs whose interval excludes 0 (any sign under the null; the true sign when `shift` is not 0)."""
    rng, k = random.Random(seed), 0
    for _ in range(runs):
        a, b = _level(rng, MODELS[model], c, bursts, shift)
        est = cluster_delta(a, b, confidence=confidence, n_boot=0)
        if est.low is not None and est.high is not None:
            k += (est.low > 0) if shift > 0 else (est.high < 0) if shift < 0 else (est.low > 0 or est.high < 0)
    return Rate(k, runs)


def decided_by_pooled_bootstrap(model: str, c: int, bursts: int, runs: int, seed: int) -> Rate:
    """The method the rank-sum interval replaced (median of pooled requests, bursts resampled), with no effect."""
    rng, k = random.Random(seed), 0
    for i in range(runs):
        a, b = _level(rng, MODELS[model], c, bursts, 0.0)
        low, high = pooled_bootstrap(a, b, 0.5, 0.95, 400, i)
        k += low > 0 or high < 0
    return Rate(k, runs)


def sequential_decided(
    model: str, c: int, design: Design, shift: float, runs: int, seed: int, peek: bool = False
) -> tuple[Rate, list[int]]:
    """Levels of `design` stopped at the first look whose interval excludes 0 (any sign under the null, the true
    sign otherwise), and the look each decided run stopped at. `peek=True` tests every look at 1 − α: the
    uncorrected peeking the design replaces."""
    rng, k, stops = random.Random(seed), 0, []
    for _ in range(runs):
        a, b = _level(rng, MODELS[model], c, design.last, shift)
        for n in range(design.first, design.last + 1):
            conf = 1.0 - design.alpha if peek else design.confidence_at(n)
            est = cluster_delta(a[:n], b[:n], confidence=conf, n_boot=0)
            if est.low is None or est.high is None:
                continue
            hit = (est.low > 0) if shift > 0 else (est.high < 0) if shift < 0 else (est.low > 0 or est.high < 0)
            if est.low > 0 or est.high < 0:
                k += hit
                stops.append(n)
                break
    return Rate(k, runs), stops


def sequential_run_decided(
    model: str, levels: tuple[int, ...], last: int, runs: int, seed: int, peek: bool = False, family: float = 0.05
) -> tuple[Rate, dict[int, Rate]]:
    """Null runs of a sweep: every level a sequential design with the run's error split over the levels
    (Bonferroni, as `check` does), each stopped at its first deciding look. Returns (runs with any level
    decided, per level decided)."""
    alpha = family / len(levels)
    design = Design.up_to(last, alpha=alpha)
    rng, any_k, per = random.Random(seed), 0, dict.fromkeys(levels, 0)
    for _ in range(runs):
        hit = False
        for c in levels:
            a, b = _level(rng, MODELS[model], c, last, 0.0)
            for n in range(design.first, last + 1):
                conf = 1.0 - alpha if peek else design.confidence_at(n)
                est = cluster_delta(a[:n], b[:n], confidence=conf, n_boot=0)
                if est.low is not None and est.high is not None and (est.low > 0 or est.high < 0):
                    per[c] += 1
                    hit = True
                    break
        any_k += hit
    return Rate(any_k, runs), {c: Rate(k, runs) for c, k in per.items()}

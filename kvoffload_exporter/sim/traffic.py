"""Synthetic workload: Poisson arrivals, shared-prefix groups with Zipf popularity, log-normal lengths.

Pure and seeded: the same `TrafficSpec` always yields the same arrivals, so a demo or benchmark run
is repeatable. Always bounded by a request count and/or a duration. `sender` puts it on the wire.
"""

from __future__ import annotations

import itertools
import math
import random
from collections.abc import Iterator
from dataclasses import dataclass


@dataclass(frozen=True)
class TrafficSpec:
    rate: float  # mean requests per second (Poisson)
    count: int | None = None  # stop after this many requests
    duration: float | None = None  # stop after this many seconds
    groups: int = 12  # shared-prefix groups (e.g. system prompts, documents)
    zipf: float = 1.1  # popularity exponent: group k is chosen ∝ 1/k^zipf
    shared: float = 0.85  # share of requests that start with a group prefix
    prefix_tokens: int = 2048  # median group prefix length
    prefix_sigma: float = 0.6
    tail_tokens: int = 96  # median unique tail length
    tail_sigma: float = 0.8
    max_tokens: int = 4
    max_prompt_tokens: int = 8000
    salted_share: float = 0.0  # share of requests sent with a per-request cache_salt (never reused)
    vocab: int = 150_000
    seed: int = 0

    def check(self) -> list[str]:
        errors = []
        if not self.rate > 0:
            errors.append("traffic rate must be > 0 requests/s")
        if self.count is None and self.duration is None:
            errors.append("traffic must be bounded: give a count and/or a duration")
        if self.count is not None and self.count < 0:
            errors.append("traffic count must be >= 0")
        if self.duration is not None and self.duration < 0:
            errors.append("traffic duration must be >= 0")
        if self.groups < 1 or not 0 <= self.shared <= 1 or not 0 <= self.salted_share <= 1:
            errors.append("traffic needs groups >= 1 and shares within [0, 1]")
        if self.max_prompt_tokens < 2:
            errors.append("max prompt tokens must be >= 2")
        return errors


@dataclass(frozen=True)
class Arrival:
    at: float  # seconds after the start
    prompt: tuple[int, ...]
    group: int | None  # None: no shared prefix
    max_tokens: int
    salt: str | None = None


def zipf_weights(n: int, s: float) -> list[float]:
    w = [1.0 / (k**s) for k in range(1, n + 1)]
    total = sum(w)
    return [x / total for x in w]


def _length(rng: random.Random, median: int, sigma: float, lo: int, hi: int) -> int:
    return max(lo, min(hi, round(median * math.exp(rng.gauss(0.0, sigma)))))


def arrivals(spec: TrafficSpec) -> Iterator[Arrival]:
    """Every request of the run, in arrival order."""
    errors = spec.check()
    if errors:
        raise ValueError("; ".join(errors))
    rng = random.Random(spec.seed)
    weights = zipf_weights(spec.groups, spec.zipf)
    budget = spec.max_prompt_tokens
    prefixes: dict[int, tuple[int, ...]] = {}

    def prefix(g: int) -> tuple[int, ...]:
        if g not in prefixes:  # each group's prefix is fixed by the seed, whatever the arrival order
            grng = random.Random(spec.seed * 1_000_003 + g)
            n = _length(grng, spec.prefix_tokens, spec.prefix_sigma, 1, budget - 1)
            prefixes[g] = tuple(grng.randrange(1000, spec.vocab) for _ in range(n))
        return prefixes[g]

    t = 0.0
    for i in itertools.count():
        t += rng.expovariate(spec.rate)
        if (spec.count is not None and i >= spec.count) or (spec.duration is not None and t > spec.duration):
            return
        group = rng.choices(range(spec.groups), weights)[0] if rng.random() < spec.shared else None
        head = prefix(group) if group is not None else ()
        room = max(1, min(budget - len(head), budget - spec.max_tokens))
        tail = tuple(
            rng.randrange(1000, spec.vocab) for _ in range(_length(rng, spec.tail_tokens, spec.tail_sigma, 1, room))
        )
        prompt = (head + tail)[: max(1, budget - spec.max_tokens)]
        salt = f"traffic-{spec.seed}-{i}" if rng.random() < spec.salted_share else None
        yield Arrival(at=t, prompt=prompt, group=group, max_tokens=spec.max_tokens, salt=salt)

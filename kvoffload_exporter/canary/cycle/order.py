"""The order of a round's probes after the displacement: balanced over the rounds, randomised by the seed; pure.

Why: a server with a position effect (the first probe after the fillers still waits for their stores to
drain, the last one meets a warmer scheduler) biases ΔTTFT whenever one path keeps one place in the round.
So rounds are taken in blocks of k, k being the probe kinds of the round (offload revisit, recompute, cold,
control target): each block is a Latin square, every kind once in every position, made of the k cyclic
rotations of one permutation. The permutation, and the order of the rotations within each block, are drawn
from the run's seed: after every complete block each kind has held each position equally often, no kind
is first by construction, and the same seed gives the same sequence (a run is reproducible from its
conditions).
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Sequence


def _rng(seed: int, kinds: Sequence[str], *more: object) -> random.Random:
    """A generator fixed by the seed and the set of kinds (a string seed is hashed with SHA-512, so the
    sequence is the same in every process, whatever PYTHONHASHSEED says)."""
    return random.Random("\x1f".join(str(p) for p in (seed, *sorted(kinds), *more)))


def round_order(kinds: Sequence[str], seed: int, n: int) -> list[str]:
    """The order of `kinds` in the n-th round (from 0) that runs exactly these kinds."""
    k = len(kinds)
    if k <= 1:
        return list(kinds)
    base = sorted(kinds)  # the caller's listing order must not matter
    _rng(seed, kinds).shuffle(base)
    block, row = divmod(n, k)
    rotations = list(range(k))
    _rng(seed, kinds, "block", block).shuffle(rotations)
    r = rotations[row]
    return base[r:] + base[:r]


class Orders:
    """Hands out each round's order; counts rounds per set of kinds, so the balance holds from the round on
    which the set last changed (e.g. once a server is seen to ignore `max_load_tokens` and the recompute
    control is dropped)."""

    def __init__(self, seed: int):
        self.seed = seed
        self._rounds: Counter[tuple[str, ...]] = Counter()

    def next(self, kinds: Sequence[str]) -> list[str]:
        key = tuple(sorted(kinds))
        order = round_order(kinds, self.seed, self._rounds[key])
        self._rounds[key] += 1
        return order


__all__ = ["Orders", "round_order"]

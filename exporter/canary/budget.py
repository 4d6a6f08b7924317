"""Hard token budget per sliding hour and exponential back-off after 429/5xx; clock injected, pure."""

from __future__ import annotations

import random
from collections import deque
from collections.abc import Callable

HOUR = 3600.0


class TokenBudget:
    """Tokens (prompt + generated) the canary may spend in any sliding hour; None = unlimited."""

    def __init__(self, per_hour: int | None, clock: Callable[[], float]):
        self.per_hour = per_hour
        self.clock = clock
        self._spent: deque[tuple[float, int]] = deque()
        self.total = 0

    def _trim(self) -> int:
        now = self.clock()
        while self._spent and self._spent[0][0] <= now - HOUR:
            self._spent.popleft()
        return sum(n for _, n in self._spent)

    def remaining(self) -> float | None:
        if self.per_hour is None:
            return None
        return max(0.0, float(self.per_hour - self._trim()))

    def can_spend(self, tokens: int) -> bool:
        rem = self.remaining()
        return rem is None or tokens <= rem

    def spend(self, tokens: int) -> None:
        self._spent.append((self.clock(), tokens))
        self.total += tokens

    def seconds_until(self, tokens: int) -> float:
        """How long until `tokens` fit (inf when they never can)."""
        if self.per_hour is None:
            return 0.0
        if tokens > self.per_hour:
            return float("inf")
        self._trim()
        need = tokens - (self.per_hour - sum(n for _, n in self._spent))
        if need <= 0:
            return 0.0
        freed = 0
        for t, n in self._spent:
            freed += n
            if freed >= need:
                return max(0.0, t + HOUR - self.clock())
        return HOUR


class Backoff:
    """Doubling delay with jitter after a server refusal or error; `Retry-After` wins when longer."""

    def __init__(self, initial: float = 5.0, maximum: float = 600.0, rng: random.Random | None = None):
        self.initial = initial
        self.maximum = maximum
        self.failures = 0
        # Unseeded (OS entropy) unless a test injects one: a fixed seed would give every replica the
        # same jitter, so they would all retry in lockstep.
        self._rng = rng if rng is not None else random.Random()

    def failure(self, retry_after: float | None = None) -> float:
        self.failures += 1
        base = min(self.maximum, self.initial * 2.0 ** (self.failures - 1))
        delay = base * (0.5 + 0.5 * self._rng.random())  # jitter: replicas do not retry in lockstep
        if retry_after is not None:
            delay = max(delay, min(retry_after, self.maximum))
        return delay

    def success(self) -> None:
        self.failures = 0

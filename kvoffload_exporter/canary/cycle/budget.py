"""Hard token budget per sliding hour and exponential back-off after 429/5xx; clock injected, pure."""

from __future__ import annotations

import logging
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
        """Count `tokens`; anything but a non-negative integer counts as 0, so the budget never grows
        back through a hostile `usage` and `total` never goes negative."""
        n = tokens if type(tokens) is int and tokens > 0 else 0
        self._spent.append((self.clock(), n))
        self.total += n

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


def cycles_per_hour(cycle_cost: int, per_hour: int | None, interval: float) -> float:
    """Steady-state cycles an hour: the interval's pace, or fewer where the budget is the limit."""
    pace = HOUR / interval if interval > 0 else float("inf")
    if per_hour is None or cycle_cost <= 0:
        return pace
    if cycle_cost > per_hour:
        return 0.0  # TokenBudget never lets such a cycle start
    return min(pace, per_hour / cycle_cost)


def minutes_to_verdict(
    needed: int, cycle_cost: int, per_hour: int | None, interval: float, per_cycle: float = 1.0
) -> float:
    """Minutes until `needed` more samples at `per_cycle` counted samples a cycle (1 at best); inf when the
    budget allows no cycle or no cycle counts."""
    if needed <= 0:
        return 0.0
    rate = cycles_per_hour(cycle_cost, per_hour, interval) * per_cycle
    return float("inf") if rate <= 0 else needed / rate * 60.0


class Notices:
    """What the serve loop says about the budget without repeating itself every interval.

    "budget allows no full cycle" is normal steady state with a tight budget: INFO the first time, then
    DEBUG. The "next verdict in ~N min" forecast is logged once and again only when the forecast changes
    (by more than 5 min or 20 % against its own countdown), not every time it counts down.
    """

    def __init__(self) -> None:
        self._budget_said = False
        self._eta: tuple[float, float] | None = None  # (said at, minutes said)

    def budget_level(self) -> int:
        level = logging.DEBUG if self._budget_said else logging.INFO
        self._budget_said = True
        return level

    def verdict_eta(
        self, now: float, needed: int, cycle_cost: int, per_hour: int | None, interval: float, per_cycle: float = 1.0
    ) -> str | None:
        """The status line to log at INFO now, or None when it would only repeat the last one. `per_cycle`:
        the counted samples a cycle has yielded so far (the ETA then follows what the canary really counts
        instead of jumping when a cycle is left out)."""
        if needed <= 0:
            return None
        minutes = minutes_to_verdict(needed, cycle_cost, per_hour, interval, per_cycle)
        if self._eta is not None:
            said_at, said = self._eta
            expected = said - (now - said_at) / 60.0
            if minutes == said == float("inf") or abs(minutes - expected) <= max(5.0, 0.2 * expected):
                return None
        self._eta = (now, minutes)
        if minutes == float("inf"):
            return f"no verdict: one cycle ({cycle_cost:,} tokens) does not fit the budget of {per_hour} tokens/h"
        rate = cycles_per_hour(cycle_cost, per_hour, interval)
        limit = "interval" if rate >= HOUR / interval else "token budget"
        return (
            f"next verdict in ~{minutes:.0f} min ({needed} more offload-hit samples at ~{rate:.1f} cycles/h and "
            f"{per_cycle:.2f} counted a cycle, limited by the {limit}; one cycle costs up to {cycle_cost:,} tokens)"
        )

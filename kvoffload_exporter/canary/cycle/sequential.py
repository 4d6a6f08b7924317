"""Stopping when decided without losing the confidence: a group-sequential rank-sum design.

`check` looks at its ΔTTFT after every counted sample (or burst) per path, from `first` up to `last`, and
stops a level at the first look whose interval excludes 0. Checking a 95 % interval at every look ("peeking")
decides a null effect far more often than 5 % (docs/canary.md measures it). Here each look n spends its own
share α_n of the error, from the power spending function α·(n/last)^ρ (Kim–DeMets), and is tested with the
exact rank-sum interval at confidence 1 − α_n. The shares add up to α, so by the union bound the chance that
any look decides under "no difference" is at most α, whatever the looks' correlation; the interval reported at
look n is that look's (1 − α_n) interval, and the intervals of every look hold together with 1 − α.

A look is a sample size, not a moment: look n uses exactly the first n counted values of each path, so the
same look always sees the same data and is never spent twice (a path ahead of the other waits). ρ = 1.5 puts
enough error at the first look (5 a path, α_5 = 1.8 % of a 10-look run) for a clear effect to stop there and
keeps most of it for the later looks. Pure; no I/O.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

FIRST_LOOK = 5
"""Counted samples (bursts) per path at the first look: below 5 against 5 no exact rank-sum interval reaches
the first look's confidence."""
RHO = 1.5
"""Exponent of the spending function α·(n/last)^ρ: 1 spends evenly (early stops, weak last look), 3 keeps
nearly everything for the last look (rare early stops)."""


@dataclass(frozen=True)
class Design:
    """Looks at n = first..last counted values per path, error `alpha` spent over them."""

    first: int
    last: int
    alpha: float = 0.05
    rho: float = RHO

    @classmethod
    def up_to(cls, last: int, alpha: float = 0.05, first: int = FIRST_LOOK) -> Design:
        """The design of a level allowed `last` counted values per path (the first look never after it)."""
        last = max(1, last)
        return cls(min(first, last), last, alpha)

    @classmethod
    def for_rounds(cls, rounds: int, min_samples: int, alpha: float) -> Design:
        """`check`'s rounds: looks up to `--rounds` counted samples a path, or `--min-samples` when larger (the
        budget the rounds always had)."""
        return cls.up_to(max(rounds, min_samples), alpha)

    def spent(self, n: int) -> float:
        """Error spent up to and including look n (0 before the first look, α from the last)."""
        if n < self.first:
            return 0.0
        return float(self.alpha * min(1.0, n / self.last) ** self.rho)

    def alpha_at(self, n: int) -> float:
        """The share of look n: what the spending function adds from look n − 1 to n (all of it up to the
        first look at the first look); 0 outside first..last."""
        if n < self.first or n > self.last:
            return 0.0
        return self.spent(n) - (self.spent(n - 1) if n > self.first else 0.0)

    def confidence_at(self, n: int) -> float:
        """The confidence of look n's interval."""
        return 1.0 - self.alpha_at(n)

    def look(self, n_offload: int, n_control: int) -> int:
        """The look the counted values allow now: the smaller path, capped at the last look (0: none yet)."""
        n = min(n_offload, n_control, self.last)
        return n if n >= self.first else 0

    def describe(self) -> dict[str, object]:
        return {
            "method": f"group-sequential rank-sum, alpha spending alpha*(n/{self.last})^{self.rho:g} over looks",
            "first_look": self.first,
            "last_look": self.last,
            "alpha": round(self.alpha, 6),
        }


def at_look(values: Sequence[object], n: int) -> list[object]:
    """The first n values of a path: what look n sees."""
    return list(values[:n])


__all__ = ["FIRST_LOOK", "RHO", "Design", "at_look"]

"""Stopping when decided without losing the confidence: a group-sequential rank-sum design.

`check` looks at its ΔTTFT after every counted sample (or burst) per path, from `first` up to `last`, and
stops a level at the first look whose interval excludes 0. Checking a 95 % interval at every look ("peeking")
decides a null effect about twice as often as 5 % (docs/canary.md measures it). Here each look n gets its own
share α_n of the error and is tested with the exact rank-sum interval at confidence 1 − α_n. The shares add up
to α, so by the union bound the chance that any look decides under "no difference" is at most α, whatever the
looks' correlation; the interval reported at look n is that look's (1 − α_n) interval, and the intervals of
every look hold together with 1 − α.

The shares: half of α at the first look (5 a path: a clear effect stops there; 5 against 5 fully separated
has a two-sided p of 0.8 %, so even a sweep level's 1.7 % can decide at it), a tenth spread over the looks
in between, the rest (0.4 α) at the last look, so that a small effect loses little power against a single
look at the end (measured in docs/canary.md). A look is a sample size, not a moment: look n uses exactly the
first n counted values of each path, so the same look always sees the same data and is never spent twice
(a path ahead of the other waits). Pure; no I/O.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

FIRST_LOOK = 5
"""Counted samples (bursts) per path at the first look: below 5 against 5 no exact rank-sum interval reaches
the first look's confidence."""
FIRST_SHARE, MIDDLE_SHARE = 0.5, 0.1
"""Shares of α at the first look and over all the looks between the first and the last (evenly); the last
look gets the rest."""


@dataclass(frozen=True)
class Design:
    """Looks at n = first..last counted values per path, error `alpha` spent over them."""

    first: int
    last: int
    alpha: float = 0.05

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

    def alpha_at(self, n: int) -> float:
        """The share of look n: half of α at the first, a tenth spread over the looks between, the rest at the
        last (all of α when the first look is the last); 0 outside first..last."""
        if n < self.first or n > self.last:
            return 0.0
        if self.first == self.last:
            return self.alpha
        middle = self.last - self.first - 1
        if n == self.first:
            return self.alpha * FIRST_SHARE
        if n == self.last:
            return self.alpha * (1.0 - FIRST_SHARE - (MIDDLE_SHARE if middle else 0.0))
        return self.alpha * MIDDLE_SHARE / middle

    def confidence_at(self, n: int) -> float:
        """The confidence of look n's interval."""
        return 1.0 - self.alpha_at(n)

    def look(self, n_offload: int, n_control: int) -> int:
        """The look the counted values allow now: the smaller path, capped at the last look (0: none yet)."""
        n = min(n_offload, n_control, self.last)
        return n if n >= self.first else 0

    def describe(self) -> dict[str, object]:
        return {
            "method": "group-sequential rank-sum: alpha/2 at the first look, alpha/10 over the looks between, "
            "the rest at the last",
            "first_look": self.first,
            "last_look": self.last,
            "alpha": round(self.alpha, 6),
        }


def at_look(values: Sequence[object], n: int) -> list[object]:
    """The first n values of a path: what look n sees."""
    return list(values[:n])


__all__ = ["FIRST_LOOK", "FIRST_SHARE", "MIDDLE_SHARE", "Design", "at_look"]

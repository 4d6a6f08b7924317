"""Token budget per sliding hour and back-off."""

from __future__ import annotations

import random

from exporter.canary.budget import Backoff, TokenBudget


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def test_budget_is_a_sliding_hour() -> None:
    clock = Clock()
    b = TokenBudget(100, clock)
    assert b.remaining() == 100 and b.can_spend(100) and not b.can_spend(101)
    b.spend(60)
    clock.t += 1800
    b.spend(30)
    assert b.remaining() == 10 and not b.can_spend(11)
    assert b.seconds_until(50) == 1800  # the first 60 expire an hour after they were spent
    clock.t += 1800
    assert b.remaining() == 70
    assert b.total == 90
    assert b.seconds_until(101) == float("inf")


def test_unlimited_budget() -> None:
    b = TokenBudget(None, Clock())
    b.spend(10**9)
    assert b.remaining() is None and b.can_spend(10**9) and b.seconds_until(5) == 0.0


def test_backoff_doubles_with_jitter_and_honours_retry_after() -> None:
    b = Backoff(1.0, 8.0, random.Random(3))
    d = [b.failure() for _ in range(6)]
    assert 0.5 <= d[0] <= 1.0 and 1.0 <= d[1] <= 2.0 and 2.0 <= d[2] <= 4.0
    assert all(4.0 <= x <= 8.0 for x in d[3:])  # capped
    assert b.failure(retry_after=30.0) == 8.0  # Retry-After, but never beyond the cap
    b.success()
    assert b.failure(retry_after=0.9) >= 0.9


def test_default_backoffs_do_not_retry_in_lockstep() -> None:
    """Two replicas built the default way (no RNG injected) draw different jitter."""
    a, b = Backoff(1.0, 1e9), Backoff(1.0, 1e9)
    da = [a.failure() for _ in range(20)]
    db = [b.failure() for _ in range(20)]
    assert da != db
    for x, y, n in zip(da, db, range(20)):
        assert 0.5 * 2**n <= min(x, y) and max(x, y) <= 2**n  # both still inside the doubling band


def test_an_injected_rng_is_reproducible() -> None:
    a, b = Backoff(1.0, 8.0, random.Random(5)), Backoff(1.0, 8.0, random.Random(5))
    assert [a.failure() for _ in range(5)] == [b.failure() for _ in range(5)]

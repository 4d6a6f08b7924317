"""A failed poll's closed reason (`ScrapeError`) and the process-wide budget of body bytes held at once
(`BodyBudget`, one `Reservation` per poll). Pure: no I/O; `sources.http1` reads into it and
`sources.vllm_http` (which re-exports these names) raises the errors."""

from __future__ import annotations


class ScrapeError(Exception):
    """A failed poll. `reason` is one of catalogue.SCRAPE_ERROR_REASONS; `detail` is for logs only."""

    def __init__(self, reason: str, detail: str):
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail


class BodyBudget:
    """Bytes of bodies held at once over every target of the process, from the first byte read until
    the poll has parsed them (a body waiting for a parser thread is held too). Each target is capped
    by `max_body_bytes`; this caps their sum, so 64 polls in flight cannot hold 64 full bodies. A poll
    that would take the sum past `limit` fails `too_large` (counted like the per-target cap) unless it
    is the only one holding bytes: the largest allowed body can always be read alone."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.used = 0
        self.holders = 0  # reservations holding bytes now

    def reserve(self) -> Reservation:
        return Reservation(self)


class Reservation:
    """One poll's share of a BodyBudget; `release` (idempotent) gives it all back."""

    __slots__ = ("budget", "held")

    def __init__(self, budget: BodyBudget) -> None:
        self.budget = budget
        self.held = 0

    def take(self, n: int) -> None:
        b = self.budget
        alone = b.holders == (1 if self.held else 0)
        if b.used + n > b.limit and not alone:
            raise ScrapeError("too_large", f"bodies in flight would exceed the process budget of {b.limit} bytes")
        if not self.held:
            b.holders += 1
        self.held += n
        b.used += n

    def release(self) -> None:
        if self.held:
            self.budget.used -= self.held
            self.budget.holders -= 1
            self.held = 0


BODY_BUDGET = BodyBudget(32 << 20)
"""The process's budget: two bodies at the default 16 MiB cap (a real vLLM body is ~70 KB)."""

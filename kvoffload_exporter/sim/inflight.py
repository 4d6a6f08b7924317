"""Prefix blocks still in flight on one engine: being loaded from the CPU tier or computed by a request.

Why: payoff under load. c concurrent revisits of one offloaded prefix either share its one load
(`load_convoy` 0, the first H200 runs) or queue behind each other's loads (`load_convoy` 1,
vllm#44294); c concurrent requests on a prefix being *computed* cannot share it and prefill a share
(`inflight_recompute`) of it again. Sequential traffic never meets a flight, so the idle calibration is
untouched. Pure: times are the engine's model seconds.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from kvoffload_exporter.sim.cache import BlockHash
from kvoffload_exporter.sim.calibration import Calibration


@dataclass
class Flight:
    """One request's loaded or computed blocks until they are usable (and its convoy's tail)."""

    ready_at: float  # load done (loading) or first token (computing)
    loading: bool
    load_wait_s: float  # the load's part of the queue time: what a convoy waiter pays again
    tail_at: float  # first token of the last request that queued on this flight


@dataclass(frozen=True)
class Wait:
    """What a new request meets: extra tokens to prefill and the earliest time it may be scheduled."""

    extra_tokens: int = 0
    not_before: float = 0.0
    flight: Flight | None = None


class InFlight:
    def __init__(self) -> None:
        self._blocks: dict[BlockHash, Flight] = {}

    def clear(self) -> None:
        self._blocks.clear()

    def _expire(self, now: float) -> None:
        gone = [h for h, f in self._blocks.items() if max(f.ready_at, f.tail_at) <= now]
        for h in gone:
            del self._blocks[h]

    def meet(self, hit: Sequence[BlockHash], block_size: int, now: float, cal: Calibration) -> Wait:
        """The wait of a request whose GPU hit covers `hit` (blocks other requests may still be filling)."""
        self._expire(now)
        flights = [self._blocks[h] for h in hit if h in self._blocks]
        if not flights:
            return Wait()
        computing = sum(1 for f in flights if not f.loading and f.ready_at > now)
        loads = [f for f in flights if f.loading]
        extra = round(cal.inflight_recompute * computing * block_size)
        if not loads:
            return Wait(extra_tokens=extra)
        f = max(loads, key=lambda x: x.tail_at)
        # Amortised: wait for the one load. Convoy: wait for the previous waiter, then load again.
        after = max(f.ready_at, f.tail_at + cal.load_convoy * f.load_wait_s) if cal.load_convoy else f.ready_at
        return Wait(extra_tokens=extra, not_before=after, flight=f)

    def add(self, blocks: Sequence[BlockHash], flight: Flight) -> None:
        for h in blocks:
            self._blocks[h] = flight

    def track(
        self, wait: Wait, blocks: Sequence[BlockHash], loaded: int, scheduled: float, first: float, queue_s: float
    ) -> None:
        """After admission: the convoy's tail moves to this request's first token; its loaded blocks
        (the first `loaded` of `blocks`) are usable once scheduled, its computed ones at its first token."""
        if wait.flight is not None:
            wait.flight.tail_at = max(wait.flight.tail_at, first)
        if loaded:
            self.add(blocks[:loaded], Flight(scheduled, True, queue_s, first))
        self.add(blocks[loaded:], Flight(first, False, 0.0, first))


__all__ = ["Flight", "InFlight", "Wait"]

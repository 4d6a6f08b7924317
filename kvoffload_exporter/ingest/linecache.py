"""A target's LineCache: the series it sent before, read with one lookup each, and its line plan.

Pure state of `exposition.read` (which fills and reads it), in its own module so that the reader keeps
one job (reading a body); `lineplan` holds the plan it keeps.
"""

from __future__ import annotations

import contextlib
import threading
from typing import Any

from kvoffload_exporter.ingest import lineplan

Known = dict[bytes, tuple[str, str, Any] | None]
"""Series text as UTF-8 (the line plan's bytes) → (family, suffix, labels), None for a series `read` skips."""


class LineCache:
    """One target's readings of the series it sent before. A vLLM body repeats the same series every
    poll with new values, so a known series costs one dict lookup instead of splitting and parsing its
    label block again. Bounded in bytes, per target (`MAX_BYTES`) and over every target of the process
    (`BUDGET`), keys included, so no body can grow it; what is not cached is read the long way, with
    the same checks.

    While a line plan reads its bodies, the cache keeps no dict: the plan holds the same keys and heads
    (`lineplan.entries` rebuilds it when a body is read the long way again). The dict of a real body's
    ~220 series is ~9 KiB a target that a planned target never reads."""

    MAX_KEY = 2048  # bytes of one key (cache_config_info lines are ~700)
    ENTRY = 120  # bytes an entry costs besides its key's characters (measured: ~90 on CPython 3.11)
    MAX_BYTES = 1 << 20
    BUDGET = 64 << 20
    held = 0  # bytes held by every LineCache of the process (worker threads read concurrently: locked)
    _lock = threading.Lock()

    __slots__ = ("_known", "key", "last", "overflow", "plan", "size")

    def __init__(self) -> None:
        self.key: object = None
        self._known: Known | None = {}  # None: the plan's entries (`known` rebuilds them)
        self.last: object = None  # the caller's: what it made of the last read, to reuse when it repeats
        self.plan = lineplan.Slot()  # the shape of the last body read the long way
        self.size = 0  # bytes this cache holds, as counted against BUDGET
        self.overflow = 0  # series the last read could not cache

    @property
    def known(self) -> Known:
        """The series known to the label reader of the last `for_reader`."""
        known = self._known
        if known is None:
            known = self._known = self.plan.entries()
        return known

    def planned(self) -> None:
        """A plan was built from `known`: it holds the entries from now on (the dict is dropped, and the
        series the plan does not hold are no longer counted)."""
        plan = self.plan.plan
        if plan is not None:
            self._known = None
            held = plan.size + self.ENTRY * len(plan.backs)
            with self._lock:
                LineCache.held += held - self.size
            self.size = held

    def for_reader(self, key: object) -> None:
        """Entries for the label reader `key` from now on; a new reader, or a last read that found more
        new series than it could cache (label sets churn), starts over."""
        if key != self.key or (self.overflow and self.overflow > len(self.known) // 2):
            self.clear()
            self.key = key
        self.overflow = 0

    def room(self, key: bytes) -> bool:
        """Whether `key` may be kept (and counted against both budgets if so)."""
        cost = len(key) + self.ENTRY
        if len(key) <= self.MAX_KEY and self.size + cost <= self.MAX_BYTES:
            with self._lock:
                if LineCache.held + cost <= self.BUDGET:
                    LineCache.held += cost
                    self.size += cost
                    return True
        self.overflow += 1
        return False

    def clear(self) -> None:
        with self._lock:
            LineCache.held -= self.size
        self.size = 0
        self._known = {}
        self.last = None
        self.plan.plan = self.plan.dropped = None  # its backoff stays: a churning target starts over here often

    def __del__(self) -> None:
        with contextlib.suppress(Exception):  # at interpreter exit the class may be torn down first
            self.clear()


__all__ = ["Known", "LineCache"]

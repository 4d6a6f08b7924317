"""What a target can make the exporter write to its log: one WARNING per failure kind per target per
interval, the detail cut to a few hundred characters, the rest counted.

A target controls its failure text (a 30 KB label set in a parse error, the raw bytes of an HTTP/0.9
answer): logging each distinct text once would be one line per poll of up to the body's size, about
2 GB a day per target at a 5 s interval. `LogBudget` lets one line per key (the failure reason, or the
extra endpoint and reason) through every `interval`, says how many it held back since, and counts those
in kvoffload_exporter_log_lines_suppressed_total. `/probe` targets share one budget (any client may
name thousands of failing URLs). Label churn (history points dropped, `derive.history`) is counted here too.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Hashable
from dataclasses import dataclass

LOG_INTERVAL = 300.0
"""Seconds between two WARNING lines of one failure kind of one target (12 an hour)."""
MAX_DETAIL = 300
"""Characters of a failure's detail a log line keeps."""
MAX_KEYS = 256
"""Keys one budget remembers (failure reasons are a closed set; extra endpoints are few)."""


@dataclass
class RuntimeBounds:
    """Process-wide counts of what was held back: log lines, and history points dropped to label churn."""

    suppressed: int = 0
    label_churn: int = 0


BOUNDS = RuntimeBounds()


def clip(detail: str, limit: int = MAX_DETAIL) -> str:
    """`detail` cut to `limit` characters, saying how much was left out."""
    if len(detail) <= limit:
        return detail
    return f"{detail[:limit]}... ({len(detail) - limit} more characters)"


class LogBudget:
    def __init__(self, interval: float = LOG_INTERVAL, timer: Callable[[], float] = time.monotonic) -> None:
        self.interval = interval
        self.timer = timer
        self._last: dict[Hashable, tuple[float, int]] = {}  # key -> (when last let through, held back since)

    def allow(self, key: Hashable) -> tuple[bool, int]:
        """(whether to log a line for `key` now, how many were held back before it); a held-back line is
        counted in BOUNDS.suppressed."""
        now = self.timer()
        last = self._last.get(key)
        if last is None or now - last[0] >= self.interval:
            if last is None and len(self._last) >= MAX_KEYS:
                self._last.clear()
            self._last[key] = (now, 0)
            return True, last[1] if last else 0
        self._last[key] = (last[0], last[1] + 1)
        BOUNDS.suppressed += 1
        return False, 0


def held_back(n: int) -> str:
    return f" ({n} similar line{'s' if n != 1 else ''} held back)" if n else ""


__all__ = ["BOUNDS", "LOG_INTERVAL", "MAX_DETAIL", "LogBudget", "RuntimeBounds", "clip", "held_back"]

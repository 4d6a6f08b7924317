"""The exporter watching itself: poll durations and lag, render time, event-loop lag, target counts.

Pure (no I/O, no clock): the poller feeds observations in, `render` writes them as catalogue
families. Histograms are aggregated over targets so their cardinality stays fixed at any fleet size.
"""

from __future__ import annotations

import bisect
from collections import deque
from dataclasses import dataclass, field

from kvoffload_exporter import redact
from kvoffload_exporter.expose.render import Exposition

POLL_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
LAG_BUCKETS = (0.001, 0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


class Histogram:
    """Cumulative-on-read histogram with fixed bounds (le buckets plus +Inf)."""

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self.bounds = bounds
        self._counts = [0] * (len(bounds) + 1)
        self.total = 0.0

    def observe(self, v: float) -> None:
        self._counts[bisect.bisect_left(self.bounds, v)] += 1
        self.total += v

    def cumulative(self) -> list[float]:
        out: list[float] = []
        acc = 0
        for c in self._counts:
            acc += c
            out.append(float(acc))
        return out


@dataclass
class SelfStats:
    poll_duration: Histogram = field(default_factory=lambda: Histogram(POLL_BUCKETS))
    poll_lag: Histogram = field(default_factory=lambda: Histogram(LAG_BUCKETS))
    render_seconds: float | None = None
    loop_lag: deque[float] = field(default_factory=lambda: deque(maxlen=20))  # 10 s of 0.5 s timers

    def render(self, x: Exposition, configured: int, up: int, probed: int) -> None:
        x.add_histogram(
            "kvoffload_exporter_poll_duration_seconds",
            {},
            self.poll_duration.bounds,
            self.poll_duration.cumulative(),
            self.poll_duration.total,
        )
        x.add_histogram(
            "kvoffload_exporter_poll_lag_seconds",
            {},
            self.poll_lag.bounds,
            self.poll_lag.cumulative(),
            self.poll_lag.total,
        )
        x.add("kvoffload_exporter_render_duration_seconds", self.render_seconds)
        x.add("kvoffload_exporter_event_loop_lag_seconds", max(self.loop_lag) if self.loop_lag else None)
        x.add("kvoffload_targets", float(configured), {"kind": "configured"})
        x.add("kvoffload_targets", float(probed), {"kind": "probed"})
        x.add("kvoffload_targets_up", float(up))
        x.add("kvoffload_exporter_redaction_secrets_evicted_total", float(redact.evicted()))

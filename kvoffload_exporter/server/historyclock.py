"""The time a target's history points are stamped with: the wall clock, without its steps.

Windows are differences of these times: a wall clock set back an hour (NTP, an operator's `date -s`) must
not make them negative, nor one set forward a day make a window of a day that was never polled.
"""

from __future__ import annotations

CLOCK_STEP = 1.0
"""Seconds the wall clock may run ahead of the monotonic clock between two polls before it counts as a step
(an operator's `date -s` a day forward): a window must not cover a day of time that was never polled."""


class HistoryClock:
    """Wall time, except that a step back, or forward by more than CLOCK_STEP, is replaced by the monotonic
    time elapsed since the last reading."""

    def __init__(self) -> None:
        self._skew = 0.0  # added to the wall clock after it stepped, so history time never does
        self._last: tuple[float, float] | None = None  # (history time, monotonic time) of the last reading

    def __call__(self, wall: float, mono: float) -> float:
        if self._last is not None:
            last, last_mono = self._last
            expected = last + max(0.0, mono - last_mono)
            if wall + self._skew < last or wall + self._skew > expected + CLOCK_STEP:
                self._skew = expected - wall  # a step either way: the monotonic time elapsed instead
        now = wall + self._skew
        self._last = (now, mono)
        return now


__all__ = ["CLOCK_STEP", "HistoryClock"]

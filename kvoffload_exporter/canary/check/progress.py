"""`check`'s live output: URLs and secrets redacted from every line, one line per round with what the verdict
waits for and a stable ETA, and waits longer than 10 s announced with their end."""

from __future__ import annotations

import math
import re
import statistics
import time
from collections.abc import Callable
from typing import Any, TextIO

from kvoffload_exporter.canary.cycle.context import Sleep
from kvoffload_exporter.canary.types import CycleReason
from kvoffload_exporter.canary.wire.secrets import scrub
from kvoffload_exporter.redact import REDACTED

PREFIX = "kvoffload-exporter check"

_USERINFO = re.compile(r"(\b[a-zA-Z][a-zA-Z0-9+.-]*://)[^/@\s]*@")


def redact(text: str) -> str:
    """URLs in messages and documents without `user:password@` (a secret must never be printed), and
    without any secret the process knows (kvoffload_exporter.redact.scrub: one redaction, one mark)."""
    return scrub(_USERINFO.sub(r"\1" + REDACTED + "@", text))


def _eta(seconds: float) -> str:
    return f"{seconds / 60:.0f} min" if seconds >= 120 else f"{seconds:.0f} s"


def eta_text(per_round: float, left: int) -> str:
    """An ETA with its basis, so a reader can see why it moves."""
    return f"~{_eta(per_round * left)} ({left} rounds left at {per_round:.1f} s each)"


class Progress:
    """Live progress: one line per round with what the verdict waits for (`counted 7/10`) and a stable ETA
    (median round time × the rounds still needed at the observed counting rate); on a terminal the current
    phase is redrawn in place."""

    def __init__(self, stream: TextIO, rounds: int, quiet: bool, need: int = 0):
        self.stream, self.rounds, self.quiet, self.need = stream, rounds, quiet, need
        self.tty = hasattr(stream, "isatty") and stream.isatty()
        self.parts: list[str] = []
        self.done = 0
        self.durations: list[float] = []
        self.counted: Callable[[], int] = lambda: 0

    def _rounds_left(self) -> int:
        counted = self.counted()
        left = max(0, self.rounds - self.done)
        if self.need and counted < self.need:
            rate = counted / self.done if self.done and counted else 0.5  # counted samples per round
            left = max(left, math.ceil((self.need - counted) / rate))
        return left

    def __call__(self, kind: str, obj: Any) -> None:
        if self.quiet:
            return
        if kind == "cycle_start":
            self.parts = []
        elif kind == "phase":
            ttft = f" {obj.ttft_seconds * 1000:.0f}ms" if obj.ttft_seconds is not None else ""
            self.parts.append(f"{obj.phase}:{obj.classification or 'done'}{ttft}")
            if self.tty:
                self.stream.write(f"\r\x1b[K round {self.done + 1}: " + " ".join(self.parts[-4:]))
                self.stream.flush()
        elif kind == "cycle":
            failed = obj.reason == CycleReason.ERROR
            if not failed:  # a failed round is quick and then waits: its time is no basis for an ETA
                self.done += 1
                self.durations.append(max(0.0, obj.finished - obj.started))
            left = self._rounds_left()
            eta = f", ETA {eta_text(statistics.median(self.durations), left)}" if left and self.durations else ""
            counted = f", counted {min(self.counted(), self.need)}/{self.need}" if self.need else ""
            prefix = "\r\x1b[K" if self.tty else ""
            self.stream.write(
                f"{prefix}round {obj.cycle} ({self.done} done{counted}{eta}): {obj.result}, "
                f"{obj.reason}" + (f" - {redact(obj.detail)}" if obj.detail else "") + "\n"
            )
            self.stream.flush()


ANNOUNCE_SECONDS = 10.0


def announced(sleep: Sleep, stream: TextIO, what: str) -> Sleep:
    """`sleep` that says what it waits for and until when whenever the wait is longer than 10 s."""

    async def wait(seconds: float) -> None:
        if seconds > ANNOUNCE_SECONDS:
            until = time.strftime("%H:%M:%S", time.gmtime(time.time() + seconds))
            print(f"{PREFIX}: waiting {seconds:.0f} s, until {until} UTC, for {what}", file=stream, flush=True)
        await sleep(seconds)

    return wait


__all__ = ["ANNOUNCE_SECONDS", "PREFIX", "Progress", "announced", "eta_text", "redact"]

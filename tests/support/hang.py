"""A guard for tests of code that used to block forever (an open() of a FIFO waiting for a writer): the
test fails with TimeoutError instead of hanging the suite. It bounds a hang, it measures no speed."""

from __future__ import annotations

import contextlib
import signal
from collections.abc import Iterator
from types import FrameType


@contextlib.contextmanager
def fails_if_blocked(seconds: int = 60) -> Iterator[None]:
    """Raise TimeoutError in the main thread when the body is still running after `seconds`."""

    def blocked(signum: int, frame: FrameType | None) -> None:
        raise TimeoutError(f"blocked for {seconds} s")

    old = signal.signal(signal.SIGALRM, blocked)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)

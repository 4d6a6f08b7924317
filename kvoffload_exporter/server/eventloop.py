"""Which event loop a long-running command runs on: asyncio's own by default, uvloop when asked for.

At 1,000 polled targets a tenth of the exporter's samples were asyncio's pure-Python machinery (the selector
loop's `_run_once`, a `TimerHandle` and a task step or two a poll). uvloop (libuv, in C) does the same work
behind the same API: ~6 % less CPU a whole poll in one process (`bench/event_loop.py`; docs/performance.md).
It is opt-in (`pip install 'kvoffload-exporter[uvloop]'`, then `uvloop`, or `auto`: uvloop where installed):
in a whole `serve` at 1,000 targets it was not measurably lower and held ~3 MiB more. (The real-Prometheus
scenario's missed output-mismatch alert, on either loop, was the rule's: a counter first scraped above zero.)
`uvloop` refuses to start without it. The listener and the poll client use the transports through
`asyncio.Transport`'s methods only, and their tests run on both loops."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


class LoopUnavailable(RuntimeError):
    """`uvloop` was asked for and is not installed."""


def factory(choice: str) -> tuple[str, Callable[[], asyncio.AbstractEventLoop] | None]:
    """(the loop's name, its factory; None: asyncio's default) for the setting `event_loop`'s choice."""
    if choice == "asyncio":
        return "asyncio", None
    try:
        import uvloop
    except ImportError:
        if choice == "uvloop":
            raise LoopUnavailable("event_loop uvloop: uvloop is not installed (pip install uvloop)") from None
        return "asyncio", None
    return "uvloop", uvloop.new_event_loop


def run(main: Coroutine[Any, Any, T], make: Callable[[], asyncio.AbstractEventLoop] | None) -> T:
    """`asyncio.run(main)` on the loop `make` makes (`factory`'s; None: asyncio's)."""
    with asyncio.Runner(loop_factory=make) as runner:
        return runner.run(main)


def current() -> str:
    """The running loop's kind, for the start-up line: "uvloop" or "asyncio"."""
    return "uvloop" if type(asyncio.get_running_loop()).__module__.startswith("uvloop") else "asyncio"


__all__ = ["LoopUnavailable", "current", "factory", "run"]

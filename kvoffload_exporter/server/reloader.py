"""SIGHUP without a dead event loop: files are read and parsed in a worker thread, applied on the loop.

Parsing 10 MB of YAML takes seconds; on the loop that is seconds of unanswered `/healthz` and of a
SIGTERM that waits. Here the signal handler only schedules; one reload runs at a time and a storm of
signals while it runs collapses into one more reload with the newest files. What the parse raises is
handed to `apply` as the error it is, so the running configuration is kept and the failure reported
as before.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Generic, TypeVar

log = logging.getLogger("kvoffload")

T = TypeVar("T")


class Reloader(Generic[T]):
    """`trigger()` from a signal handler; `parse()` runs in a thread, `apply(result or exception)` on the loop."""

    def __init__(self, parse: Callable[[], T], apply: Callable[[T | Exception], None]) -> None:
        self._parse = parse
        self._apply = apply
        self._task: asyncio.Task[None] | None = None
        self._again = False

    def trigger(self) -> None:
        if self._task is not None and not self._task.done():
            self._again = True  # newest files win; no queue of reloads
            return
        self._again = False
        self._task = asyncio.ensure_future(self._run())

    async def _run(self) -> None:
        while True:
            result: T | Exception
            try:
                result = await asyncio.to_thread(self._parse)
            except Exception as e:  # handed over: apply reports it and keeps what runs
                result = e
            try:
                self._apply(result)
            except Exception:  # a bug in applying must not end the reloads to come
                log.exception("configuration reload failed")
            if not self._again:
                return
            self._again = False

    async def wait(self) -> None:
        """Until the reload in progress (if any) is applied: tests and shutdown."""
        while self._task is not None and not self._task.done():
            await asyncio.shield(self._task)


__all__ = ["Reloader"]

"""SIGHUP without a dead event loop: files are read and parsed in a worker thread, applied on the loop.

Parsing 10 MB of YAML takes seconds; on the loop that is seconds of unanswered `/healthz` and of a
SIGTERM that waits. Here the signal handler only schedules; one reload runs at a time and a storm of
signals while it runs collapses into one more reload with the newest files. What the parse raises is
handed to `apply` as the error it is, so the running configuration is kept and the failure reported
as before.

The parse runs in a daemon thread of its own, not in the event loop's executor: a read that never
returns (a file on a hung network mount) must not hold SIGTERM, and the executor is joined on exit
while a daemon thread is not. Files are opened non-blocking and must be regular
(kvoffload_exporter.saferead), so a FIFO swapped in for the config is refused, never waited on.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
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
                result = await _in_daemon_thread(self._parse)
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


def _in_daemon_thread(fn: Callable[[], T]) -> asyncio.Future[T]:
    """`fn()` in a new daemon thread, its result (or exception) as a future of the running loop."""
    loop = asyncio.get_running_loop()
    future: asyncio.Future[T] = loop.create_future()

    def settle(value: T | None, error: BaseException | None) -> None:
        if future.done():  # cancelled: the process is stopping
            return
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(value)  # type: ignore[arg-type]

    def work() -> None:
        try:
            value, error = fn(), None
        except BaseException as e:  # handed to the loop as it is
            value, error = None, e
        with contextlib.suppress(RuntimeError):  # the loop closed while the parse ran
            loop.call_soon_threadsafe(settle, value, error)

    threading.Thread(target=work, name="kvoffload-reload", daemon=True).start()
    return future


__all__ = ["Reloader"]

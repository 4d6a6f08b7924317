"""The exporter's listener with limits: idle or slow clients cannot take its file descriptors or its logs.

Every accepted connection passes through `_Guard` before aiohttp sees a byte:
- at most `max_connections` open at once (TLS handshakes included, since TLS is started here, after the
  count); which address may take a slot (a few half-open ones per address, a reserve for scrapers seen
  before, a `/healthz` lane when all are taken) is `connslots`: one more is closed and counted
  (`connection_limit`);
- the request line and headers must be complete within `header_timeout` seconds of the connection (or of
  the first byte of the next request on a kept-alive one), TLS handshake included (`header_timeout`);
- at most `max_header_bytes` before the blank line that ends the headers: 431 and close (`bad_request`);
- a client that stops reading its answer is closed when its send buffer has not shrunk over
  `write_timeout` seconds (`write_timeout`): an unread 5 MB /metrics body is not kept per connection;
- a request aiohttp's parser refuses (bad request line, HTTP/9.9, duplicate Content-Length, a line over
  8 KiB) is answered 400 by aiohttp and logged here as one DEBUG line, never an ERROR with a traceback.
The counts are kvoffload_exporter_http_rejected_total{reason} and kvoffload_exporter_http_connections.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any, cast

from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError

from kvoffload_exporter.enums import HttpRejectReason
from kvoffload_exporter.server.connslots import HEALTHZ_OK, HEALTHZ_TIMEOUT, Admit, Slots, healthz_answer
from kvoffload_exporter.server.guards import GuardStats

log = logging.getLogger("kvoffload.listener")
_TOO_LARGE = b"HTTP/1.1 431 Request Header Fields Too Large\r\nConnection: close\r\nContent-Length: 0\r\n\r\n"


@dataclass(frozen=True)
class ListenLimits:
    max_connections: int = 256  # well under the usual 1,024 descriptors: polls and files keep theirs
    header_timeout: float = 10.0
    max_header_bytes: int = 32 * 1024
    keepalive_timeout: float = 30.0  # an idle kept-alive connection is closed after this
    write_timeout: float = 30.0  # an answer whose send buffer stays full this long is dropped

    def within_descriptors(self) -> ListenLimits:
        """At most half the process's file descriptors go to clients: polls, files and the listening
        socket keep the rest (a `ulimit -n 256` container gets 128 connections, not 256 and EMFILE)."""
        import resource

        soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
        if soft == resource.RLIM_INFINITY or self.max_connections <= soft // 2:
            return self
        log.warning(
            "web.max_connections %d lowered to %d: half of the %d file descriptors this process may open",
            self.max_connections,
            max(8, soft // 2),
            soft,
        )
        return replace(self, max_connections=max(8, soft // 2))

    # Any: keyword arguments of aiohttp's AppRunner, each its own type
    def runner_kwargs(self, guards: GuardStats) -> dict[str, Any]:
        """aiohttp's own caps and a logger that turns parse errors into one counted DEBUG line. A request
        whose client went away is cancelled (`handler_cancellation`): an abandoned `/probe` stops waiting for
        a probe slot, and its poll stops, instead of holding the slot for the probes that still wait."""
        return {
            "handler_cancellation": True,
            "shutdown_timeout": SHUTDOWN_TIMEOUT,
            "max_line_size": 8190,
            "max_field_size": 8190,
            "max_headers": 64,
            "keepalive_timeout": self.keepalive_timeout,
            "logger": _ServerLog(guards),
        }


class _ServerLog:
    """What aiohttp's request handler logs through: a refused request is one DEBUG line and a count;
    anything else (a bug in a handler) is still an ERROR with its traceback."""

    def __init__(self, guards: GuardStats) -> None:
        self.guards = guards
        self._server = logging.getLogger("aiohttp.server")

    def exception(self, msg: str, *args: object, exc_info: object = None, **kw: Any) -> None:
        if isinstance(exc_info, HttpProcessingError):
            self.guards.reject(HttpRejectReason.BAD_REQUEST)
            peer = args[0] if args else "?"
            log.debug("bad request from %s: %s (400)", peer, type(exc_info).__name__)  # never the bytes sent
            return
        self._server.exception(msg, *args, exc_info=exc_info, **kw)  # type: ignore[arg-type]

    def debug(self, msg: str, *args: object, exc_info: object = None, **kw: Any) -> None:
        self.exception(msg, *args, exc_info=exc_info, **kw) if exc_info is not None else self._server.debug(msg, *args)

    def __getattr__(self, name: str) -> Any:  # debug, info, warning, error: aiohttp's own logger
        return getattr(self._server, name)


class _Guard(asyncio.Protocol):
    """Counts, times and sizes one connection, starts TLS, then hands the bytes to aiohttp's handler."""

    def __init__(self, site: GuardedSite) -> None:
        self.site = site
        self.inner: asyncio.Protocol | None = None
        self.transport: asyncio.Transport | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._open = 0  # bytes of the header block being received
        self._tail = b""
        self._counted = False
        self.peer = ""
        self._early: list[bytes] = []
        self._refused = False  # headers over the cap: nothing more is read
        self._stall: asyncio.TimerHandle | None = None  # the write watchdog
        self._raw: asyncio.Transport | None = None  # the TCP transport (under TLS, the one that buffers)
        self._last_buffered = 0
        self._pending = True  # no complete request headers yet: counted against the address's pending cap
        self._lane: bytes | None = None  # the /healthz lane: the request line received so far
        self._in_lane = False

    def connection_made(self, base: asyncio.BaseTransport) -> None:
        transport = cast(asyncio.Transport, base)  # uvloop's transports are not asyncio.Transport subclasses
        site, guards = self.site, self.site.guards
        peer = transport.get_extra_info("peername")
        self.peer = str(peer[0]) if isinstance(peer, tuple) and peer else ""
        admit = site.slots.admit(self.peer, guards.is_trusted(self.peer), site.tls is None and site.healthz_open())
        if admit is Admit.HEALTHZ:
            self.transport, self._lane, self._in_lane = transport, b"", True
            self._timer = asyncio.get_running_loop().call_later(HEALTHZ_TIMEOUT, self._lane_answer)
            return
        if admit is Admit.REFUSE:
            guards.reject(HttpRejectReason.CONNECTION_LIMIT)
            transport.abort()
            return
        guards.connections = site.slots.open
        self._counted = True
        site.open.add(self)
        self.transport = self._raw = transport
        self._arm()
        self._stall = asyncio.get_running_loop().call_later(site.limits.write_timeout, self._watch_writes)
        if site.tls is None:
            self._hand_over(transport)
        else:
            transport.pause_reading()  # the ClientHello waits for start_tls, unread
            site.tasks.add(task := asyncio.ensure_future(self._start_tls(transport, site.tls)))
            task.add_done_callback(site.tasks.discard)

    async def _start_tls(self, raw: asyncio.Transport, ctx: ssl.SSLContext) -> None:
        loop = asyncio.get_running_loop()
        tls: asyncio.BaseTransport | None = None
        try:
            tls = await loop.start_tls(
                raw, self, ctx, server_side=True, ssl_handshake_timeout=self.site.limits.header_timeout
            )
        except (OSError, ssl.SSLError, TimeoutError, ConnectionError) as e:
            log.debug("TLS handshake failed: %s", type(e).__name__)
        finally:
            if tls is None or raw.is_closing():  # failed, timed out or cancelled: nobody else will close it
                raw.abort()
                self._release()
        if tls is None or raw.is_closing():
            return
        self.transport = cast(asyncio.Transport, tls)
        self._hand_over(self.transport)

    def _hand_over(self, transport: asyncio.Transport) -> None:
        if self._refused:
            self._answer_431()
            return
        server = self.site.runner_server()
        self.inner = server()
        self.inner.connection_made(transport)
        early, self._early = self._early, []
        for data in early:
            self.inner.data_received(data)

    def _arm(self) -> None:
        if self._timer is None:
            self._timer = asyncio.get_running_loop().call_later(self.site.limits.header_timeout, self._timed_out)

    def _disarm(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _timed_out(self) -> None:
        self._timer = None
        self.site.guards.reject(HttpRejectReason.HEADER_TIMEOUT)
        log.debug("headers not complete within %gs: closed", self.site.limits.header_timeout)
        if self.transport is not None:
            self.transport.abort()

    def _answer_431(self) -> None:
        if self.transport is not None:
            self.transport.write(_TOO_LARGE)
            self.transport.close()

    def _lane_answer(self) -> None:
        """The `/healthz` lane's one answer (on its request line, its timeout or its size cap), then close."""
        self._disarm()
        answer = healthz_answer(self._lane or b"")
        if answer != HEALTHZ_OK:
            self.site.guards.reject(HttpRejectReason.CONNECTION_LIMIT)
        if self.transport is not None and not self.transport.is_closing():
            self.transport.write(answer)
            self.transport.close()
        self._lane = None

    def _track_pending(self) -> None:
        """Pending while the headers of the first request, or of the next one begun, are not complete."""
        pending = self._open > 0
        if pending != self._pending:
            self._pending = pending
            (self.site.slots.headers_started if pending else self.site.slots.headers_done)(self.peer)

    def data_received(self, data: bytes) -> None:
        if self._lane is not None:
            self._lane += data
            if b"\r\n" in self._lane or len(self._lane) > 1024:
                self._lane_answer()
            return
        if self._refused:
            return
        buf, start, biggest = self._tail + data, 0, 0
        while (end := buf.find(b"\r\n\r\n", start)) >= 0:  # each header block that ends in this chunk
            block = (self._open - len(self._tail) if start == 0 else 0) + end + 4 - start
            biggest, start = max(biggest, block), end + 4
        self._open = len(buf) - start + (self._open - len(self._tail) if start == 0 else 0)
        self._tail = buf[-3:]
        if max(biggest, self._open) > self.site.limits.max_header_bytes:
            self.site.guards.reject(HttpRejectReason.BAD_REQUEST)
            log.debug("request headers over %d bytes: 431", self.site.limits.max_header_bytes)
            self._disarm()
            self._refused = True
            if self.inner is not None or self.site.tls is None:  # else: answered once TLS is up (_hand_over)
                self._answer_431()
            return
        if self._open:
            self._arm()
        else:
            self._disarm()
        if self._open or start:  # no byte at all since the last request is still as it was
            self._track_pending()
        if self.inner is not None:
            self.inner.data_received(data)
        else:  # decrypted before start_tls returned: kept (within the header cap) for the hand-over
            self._early.append(data)

    def eof_received(self) -> bool | None:
        return self.inner.eof_received() if self.inner is not None else None

    def pause_writing(self) -> None:
        if self.inner is not None:
            self.inner.pause_writing()

    def resume_writing(self) -> None:
        if self.inner is not None:
            self.inner.resume_writing()

    def _watch_writes(self) -> None:
        """Every `write_timeout`: an answer still buffered and not smaller than last time means the
        client stopped reading (checked on the TCP transport, under TLS too)."""
        self._stall = None
        size = self._raw.get_write_buffer_size() if self._raw is not None else 0
        if size and size >= self._last_buffered:
            self.site.guards.reject(HttpRejectReason.WRITE_TIMEOUT)
            log.debug("client stopped reading for %gs: closed", self.site.limits.write_timeout)
            if self._raw is not None:
                self._raw.abort()
            return
        self._last_buffered = size
        self._stall = asyncio.get_running_loop().call_later(self.site.limits.write_timeout, self._watch_writes)

    def connection_lost(self, exc: Exception | None) -> None:
        if self._in_lane:
            self._disarm()
            self._lane, self._in_lane = None, False
            self.site.slots.release_lane(self.peer)
            return
        self._release()
        if self.inner is not None:
            self.inner.connection_lost(exc)

    def _release(self) -> None:
        self._disarm()
        if self._stall is not None:
            self._stall.cancel()
            self._stall = None
        if self._counted:
            self._counted = False
            self.site.slots.release(self.peer, self._pending)
            self.site.guards.connections = self.site.slots.open
            self.site.open.discard(self)


SHUTDOWN_TIMEOUT = 4.0
"""Seconds a SIGTERM waits for requests in flight (a `/probe` polling a slow target, a `POST /-/reload`)
before they are cancelled; aiohttp's default is 60, past Kubernetes' 30 s grace (then SIGKILL)."""


class GuardedSite(web.SockSite):
    """aiohttp's SockSite with every connection behind `_Guard` (TLS started by the guard)."""

    def __init__(
        self,
        runner: web.BaseRunner,
        sock: Any,
        guards: GuardStats,
        limits: ListenLimits | None = None,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        self.limits = limits or ListenLimits()
        # asyncio accepts up to `backlog` connections per wake-up before any protocol runs: a quarter of
        # the connection cap keeps cap + batch under the descriptor limit (no EMFILE, no accept pause).
        super().__init__(runner, sock, ssl_context=ssl_context, backlog=max(8, self.limits.max_connections // 4))
        self.guards = guards
        self.tls = ssl_context
        self.open: set[_Guard] = set()
        self.slots = Slots(self.limits.max_connections)
        self.healthz_open: Callable[[], bool] = lambda: True  # serve: False while basic auth guards /healthz
        self.tasks: set[asyncio.Future[None]] = set()

    def runner_server(self) -> web.Server:
        server = self._runner.server
        assert server is not None
        return server

    async def start(self) -> None:
        self._runner._reg_site(self)
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(lambda: _Guard(self), sock=self._sock, backlog=self._backlog)
        # ... while the kernel's queue stays long: a burst of connections closed at once must not make the
        # kubelet's SYN wait for a retransmit (the batch size above is asyncio's, this is the kernel's).
        self._sock.listen(1024)

    async def stop(self) -> None:
        await super().stop()
        for task in list(self.tasks):
            task.cancel()
        for g in list(self.open):
            if g.inner is None and g.transport is not None:  # not aiohttp's yet: nobody else closes it
                g.transport.abort()


__all__ = ["GuardedSite", "ListenLimits"]

"""The target polls' HTTP client: keep-alive HTTP/1.1 GETs over `http1.Conn`, one pool of idle
connections per origin (scheme, host, port), no per-request session machinery.

What it sends: `Host` (with the port when not the scheme's default), `User-Agent: kvoffload-exporter/…`,
`Accept-Encoding: identity`, `Connection: keep-alive` and the caller's headers (`Accept`, and
`Authorization` for the target only: `vllm_http` decides). Never a cookie; nothing is remembered
between requests but the open connections. https uses the default verifying SSL context, as aiohttp's
client did.

Why `Accept-Encoding: identity`: a target is a vLLM API server whose `/metrics` (prometheus_client)
compresses when asked, at the cost of its own CPU on every poll, and a sidecar's polls travel over
loopback or a pod network where 70 KB is nothing; inflating would cost the exporter CPU as well. A target
that compresses anyway (gzip or deflate) is still read, capped after decompression (`http1.decode`).

Keep-alive: a connection goes back to its origin's pool only after a response read to its exact end
without `Connection: close`; one that errored, timed out, was cancelled or read partly is closed. A
pooled connection the server closes while idle is noticed (EOF) and dropped; one it closes just as a
request is written fails before any byte of the response arrives (`http1.Stale`), and the request is
sent once more on a fresh connection. Idle connections are bounded per origin and in total (a quarter of
the process's file descriptors, at most 4,096) and closed after IDLE_SECONDS unused.
"""

from __future__ import annotations

import asyncio
import os
import re
import socket
import ssl
import time
from collections.abc import Mapping
from types import TracebackType
from urllib.parse import quote, urlsplit

from kvoffload_exporter import __version__
from kvoffload_exporter.sources.budget import Reservation, ScrapeError
from kvoffload_exporter.sources.http1 import Conn, Framing, Stale, decode, read_body, read_head

USER_AGENT = f"kvoffload-exporter/{__version__}"
IDLE_PER_ORIGIN = 128
"""Idle connections kept per origin: a fleet behind one address (a gateway, the benchmark's fake
targets) holds up to `max_concurrent_polls` (64 by default) in flight."""
IDLE_SECONDS = 60.0
_PREPARED_MAX = 4096

Key = tuple[str, str, int]


def _idle_total() -> int:
    """A quarter of the file descriptors this process may open (the listener takes up to half), 16 to 4,096."""
    import resource

    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    return 4096 if soft == resource.RLIM_INFINITY else max(16, min(4096, soft // 4))


def _errno_text(e: OSError) -> str:
    """`connection refused`; create_connection's "Multiple exceptions: [Errno 111] ..." (every address
    failed) reads as its first errno."""
    errno = e.errno
    if errno is None and (m := re.search(r"\[Errno (\d+)\]", str(e))):
        errno = int(m.group(1))
    if errno is not None and errno > 0:
        return os.strerror(errno).lower()
    return (e.strerror or "failed").lower()


def _connect_error(e: OSError, host: str, port: int) -> ScrapeError:
    if isinstance(e, socket.gaierror):
        return ScrapeError("connect", f"cannot resolve {host}: {e.strerror or e}")
    if isinstance(e, ssl.SSLCertVerificationError):
        why = e.verify_message or e.reason or type(e).__name__
        return ScrapeError("tls", f"TLS certificate of {host}:{port} not trusted: {why}")
    if isinstance(e, ssl.SSLError):
        why = str(e.reason or type(e).__name__).lower().replace("_", " ")
        return ScrapeError("tls", f"TLS handshake with {host}:{port} failed: {why}")
    if isinstance(e, ConnectionResetError):
        return ScrapeError("connect", "connection reset by the server")
    return ScrapeError("connect", f"cannot connect to {host}:{port}: {_errno_text(e)}")


class Response:
    """A response whose head was read; `read` the body, then `release` (always) gives the connection back
    to the pool when it may be reused, else closes it."""

    __slots__ = ("_client", "_conn", "_framing", "_read", "_start", "headers", "key", "status")

    def __init__(self, client: PollClient, conn: Conn, key: Key, head: tuple[int, dict[str, str], bool, int]) -> None:
        self.status, self.headers, http11, self._start = head
        self._client, self._conn, self.key = client, conn, key
        self._framing = Framing(self.status, self.headers, http11)
        self._read = False

    async def read(self, max_bytes: int, hold: Reservation | None = None) -> bytes | bytearray:
        """The body (decompressed), refused past `max_bytes`; its bytes charged to `hold` as they arrive."""
        body = await read_body(self._conn, self._start, self._framing, max_bytes, hold)
        self._read = True
        return decode(body, self.headers.get("content-encoding", ""), max_bytes, hold)

    def release(self) -> None:
        conn = self._conn
        if self._read and self._framing.keep and not conn.done:
            self._client.put_idle(self.key, conn)
        else:
            self._client.drop(conn)


class PollClient:
    """Keep-alive GETs for the polls; `close` (or leaving `async with`) closes every connection."""

    def __init__(self, ssl_context: ssl.SSLContext | None = None) -> None:
        self._ssl = ssl_context
        self._idle: dict[Key, list[Conn]] = {}
        self._idle_n = 0
        self._idle_total = _idle_total()
        self._open: set[Conn] = set()
        self._prepared: dict[tuple[str, tuple[tuple[str, str], ...]], tuple[Key, bytes]] = {}
        self._swept = time.monotonic()
        self.closed = False
        self.connects = 0  # connections opened so far (tests count reuse with it)

    async def __aenter__(self) -> PollClient:
        return self

    async def __aexit__(self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None) -> None:
        await self.close()

    async def close(self) -> None:
        self.closed = True
        for conn in list(self._open):
            conn.close()
        self._open.clear()
        self._idle.clear()
        self._idle_n = 0
        await asyncio.sleep(0)  # the transports close on the loop's next turn

    def prepare(self, url: str, headers: Mapping[str, str]) -> tuple[Key, bytes]:
        """(origin, request bytes) for a GET of `url` (no userinfo: the caller sends it as a header)."""
        ck = (url, tuple(headers.items()))
        if (hit := self._prepared.get(ck)) is not None:
            return hit
        parts = urlsplit(url)
        scheme = parts.scheme.lower()
        try:
            port = parts.port
        except ValueError:
            raise ScrapeError("connect", "the URL's port is not a number") from None
        host = parts.hostname or ""
        if scheme not in ("http", "https") or not host:
            raise ScrapeError("connect", "not an http(s) URL with a host")
        default = 443 if scheme == "https" else 80
        port = default if port is None else port
        name = host if host.isascii() else host.encode("idna").decode("ascii")
        netloc = f"[{name}]" if ":" in name else name
        target = quote(parts.path or "/", safe="/%:@!$&'()*+,;=-._~")
        if parts.query:
            target += "?" + quote(parts.query, safe="/%:@!$&'()*+,;=-._~?")
        lines = [f"GET {target} HTTP/1.1", f"Host: {netloc}" + ("" if port == default else f":{port}")]
        lines += [f"User-Agent: {USER_AGENT}", "Accept-Encoding: identity", "Connection: keep-alive"]
        if not any(k.lower() == "accept" for k in headers):
            lines.append("Accept: */*")
        for k, v in headers.items():
            if any(c in k or c in v for c in "\r\n\0"):
                raise ScrapeError("connect", "a request header holds a line break")
            lines.append(f"{k}: {v}")
        hit = ((scheme, host, port), ("\r\n".join(lines) + "\r\n\r\n").encode("utf-8"))
        if len(self._prepared) >= _PREPARED_MAX:
            self._prepared.clear()
        self._prepared[ck] = hit
        return hit

    async def open(self, url: str, headers: Mapping[str, str], connect_timeout: float) -> Response:
        """Send the GET and read the response's head (an idle connection to the origin first; on a stale
        one, once more on a fresh connection)."""
        if self.closed:
            raise ScrapeError("connect", "the poll client is closed")
        key, request = self.prepare(url, headers)
        conn = self._take_idle(key)
        if conn is not None:
            try:
                return await self._exchange(conn, key, request, True)
            except Stale:
                pass
        conn = await self._connect(key, connect_timeout)
        return await self._exchange(conn, key, request, False)

    async def _exchange(self, conn: Conn, key: Key, request: bytes, reused: bool) -> Response:
        conn.busy = True
        try:
            transport = conn.transport
            if transport is None or transport.is_closing():
                if reused:
                    raise Stale()
                raise ScrapeError("connect", "the server closed the connection")
            transport.write(request)
            head = await read_head(conn, reused)
        except BaseException:
            self.drop(conn)
            raise
        return Response(self, conn, key, head)

    async def _connect(self, key: Key, timeout: float) -> Conn:
        scheme, host, port = key
        loop = asyncio.get_running_loop()
        tls = self._tls() if scheme == "https" else None
        try:
            async with asyncio.timeout(timeout):
                _, conn = await loop.create_connection(
                    lambda: Conn(loop), host, port, ssl=tls, server_hostname=host if tls is not None else None
                )
        except TimeoutError:
            raise
        except OSError as e:
            raise _connect_error(e, host, port) from e
        self.connects += 1
        self._open.add(conn)
        return conn

    def _tls(self) -> ssl.SSLContext:
        if self._ssl is None:
            self._ssl = ssl.create_default_context()
        return self._ssl

    def _take_idle(self, key: Key) -> Conn | None:
        pool = self._idle.get(key)
        while pool:
            conn = pool.pop()
            self._idle_n -= 1
            if not conn.done and time.monotonic() - conn.idle_since < IDLE_SECONDS:
                return conn
            self.drop(conn)
        return None

    def put_idle(self, key: Key, conn: Conn) -> None:
        now = time.monotonic()
        if now - self._swept > IDLE_SECONDS / 4:
            self._sweep(now)
        pool = self._idle.setdefault(key, [])
        if self.closed or len(pool) >= IDLE_PER_ORIGIN or self._idle_n >= self._idle_total:
            self.drop(conn)
            return
        conn.reset()
        conn.idle_since = now
        pool.append(conn)
        self._idle_n += 1

    def drop(self, conn: Conn) -> None:
        conn.close()
        self._open.discard(conn)

    def _sweep(self, now: float) -> None:
        """Idle connections the server closed, or unused for IDLE_SECONDS (a removed target's), go."""
        self._swept = now
        for key, pool in list(self._idle.items()):
            keep = []
            for c in pool:
                if c.done or now - c.idle_since >= IDLE_SECONDS:
                    self.drop(c)
                else:
                    keep.append(c)
            self._idle_n -= len(pool) - len(keep)
            if keep:
                self._idle[key] = keep
            else:
                del self._idle[key]

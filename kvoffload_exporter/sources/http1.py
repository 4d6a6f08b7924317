"""The poll client's wire side: one HTTP/1.1 connection as an `asyncio.Protocol`, and a response read
from it (head, then a body framed by Content-Length, chunked encoding or the end of the connection).

Why a Protocol: the polls are the exporter's hot path (1,000 targets at 5 s are 200 GETs a second), and
aiohttp's client spent more of a poll's CPU than parsing the body did (docs/performance.md). Here bytes
go from `data_received` straight into the connection's one bytearray; the reading coroutine is woken
only when what it waits for is there (the head's end, the whole declared body), not for every read.

Every byte is hostile: the head is capped in total size (MAX_HEAD_BYTES), header count and line length;
a chunk-size line is capped and must be hex; the body is capped at the poll's `max_bytes` and charged to
its `Reservation` as it arrives, and a gzip or deflate body is capped again after decompression (a zip
bomb stops at `max_bytes` + 1 bytes). A connection is reused only after a response read to its exact end
without `Connection: close`; anything else closes it (`pollclient.PollClient` keeps the reusable ones).
"""

from __future__ import annotations

import asyncio
import zlib
from typing import cast

from kvoffload_exporter.sources.budget import Reservation, ScrapeError

MAX_HEAD_BYTES = 64 * 1024
"""Status line and headers together; more is a `connect` error (aiohttp's client allowed 8190 per line)."""
MAX_HEADERS = 128
MAX_LINE_BYTES = 8190
MAX_CHUNK_LINE = 1024
"""A chunk-size line (hex size and extensions); real ones are under 20 bytes."""

_NO_WANT = 1 << 62


class Stale(Exception):
    """A reused connection the server had closed: nothing of the response arrived (retry on a fresh one)."""


class Conn(asyncio.Protocol):
    """One connection's bytes: appended to `buf` as they arrive, the reader woken once `want` bytes are
    there or nothing more can come. While a body is read, each arriving byte is charged to `hold` and
    the buffer is capped (`cap`): the poll fails there and then, before the rest is buffered. Slotted: an
    open connection per origin (a fleet of 1,000 targets, 1,000 of them) keeps no attribute dict."""

    __slots__ = (
        *("buf", "busy", "cap", "cap_error", "done", "failure", "hold", "idle_since", "loop", "lost"),
        *("transport", "waiter", "want"),
    )

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.transport: asyncio.Transport | None = None
        self.buf = bytearray()
        self.done = False  # EOF, lost or closed: nothing more will arrive
        self.lost: BaseException | None = None  # why the connection was lost, when not a clean EOF
        self.failure: ScrapeError | None = None  # a cap passed while bytes arrived
        self.waiter: asyncio.Future[None] | None = None
        self.want = _NO_WANT
        self.cap = _NO_WANT  # the head's cap is the reader's (it wakes on every read until the head ends)
        self.cap_error = ("too_large", "")
        self.hold: Reservation | None = None
        self.busy = False  # a request was sent and its response is not fully read
        self.idle_since = 0.0

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # a uvloop transport is not an asyncio.Transport subclass, yet has its methods
        self.transport = cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        if not self.busy:  # bytes nobody asked for: the connection is out of step, never reused
            self.close()
            return
        if self.hold is not None:
            try:
                self.hold.take(len(data))
            except ScrapeError as e:
                self.fail(e)
                return
        buf = self.buf
        buf += data
        if len(buf) > self.cap:
            self.fail(ScrapeError(*self.cap_error))
        elif len(buf) >= self.want:
            self.wake()

    def eof_received(self) -> bool:
        self.done = True
        self.wake()
        return False  # the transport closes itself

    def connection_lost(self, exc: BaseException | None) -> None:
        self.done = True
        if exc is not None and self.lost is None:
            self.lost = exc
        self.wake()

    def fail(self, e: ScrapeError) -> None:
        self.failure = e
        self.close()
        self.wake()

    def wake(self) -> None:
        w = self.waiter
        if w is not None and not w.done():
            w.set_result(None)

    def close(self) -> None:
        self.done = True
        if self.transport is not None:
            self.transport.abort()  # never reused: nothing left to flush or to wait for

    def reset(self) -> None:
        """Ready for the next request (the last response was read to its exact end)."""
        self.buf = bytearray()
        self.hold = None
        self.cap = _NO_WANT
        self.busy = False

    async def wait(self, want: int) -> None:
        """Until `buf` holds `want` bytes, or nothing more can arrive (check `done`, `failure`)."""
        if len(self.buf) >= want or self.done:
            return
        self.want = want
        self.waiter = w = self.loop.create_future()
        try:
            await w
        finally:
            self.waiter = None
            self.want = _NO_WANT


def _bad(detail: str) -> ScrapeError:
    return ScrapeError("connect", f"malformed response: {detail}")


def transport_text(e: BaseException | None) -> str:
    """A lost connection in words, without the client's internals (`[Errno 104]`, the exception's class)."""
    if e is None:
        return "the server closed the connection"
    if isinstance(e, ConnectionResetError):
        return "connection reset by the server"
    if isinstance(e, OSError) and e.strerror:
        return e.strerror
    return str(e) or type(e).__name__


async def read_head(conn: Conn, reused: bool) -> tuple[int, dict[str, str], bool, int]:
    """(status, headers with lower-case names, HTTP/1.1, where the body starts in `conn.buf`).
    Raises Stale on a reused connection closed before its first byte."""
    pos = 0
    while (end := conn.buf.find(b"\r\n\r\n", max(0, pos - 3))) < 0 or end > MAX_HEAD_BYTES:
        if len(conn.buf) > MAX_HEAD_BYTES:
            raise _bad(f"head over {MAX_HEAD_BYTES} bytes")
        if conn.failure is not None:
            raise conn.failure
        if conn.done:
            if reused and not conn.buf:
                raise Stale()
            raise ScrapeError("connect", transport_text(conn.lost))
        pos = len(conn.buf)
        await conn.wait(pos + 1)
    lines = bytes(conn.buf[:end]).split(b"\r\n")
    version, _, rest = lines[0].partition(b" ")
    code = rest[:3]
    if version not in (b"HTTP/1.1", b"HTTP/1.0") or len(code) != 3 or not code.isdigit() or rest[3:4] not in b" ":
        raise _bad("status line")
    if len(lines) - 1 > MAX_HEADERS:
        raise _bad(f"more than {MAX_HEADERS} headers")
    headers: dict[str, str] = {}
    for line in lines[1:]:
        if len(line) > MAX_LINE_BYTES:
            raise _bad(f"a header line over {MAX_LINE_BYTES} bytes")
        name, sep, value = line.partition(b":")
        if not sep or not name or name[-1:] in (b" ", b"\t") or line[:1] in (b" ", b"\t"):
            raise _bad("header line")
        key = name.decode("latin-1").lower()
        text = value.strip(b" \t").decode("latin-1")
        headers[key] = f"{headers[key]}, {text}" if key in headers else text
    return int(code), headers, version == b"HTTP/1.1", end + 4


class Framing:
    """How a response's body ends: `length` bytes, chunked, or the end of the connection (length None)."""

    __slots__ = ("chunked", "keep", "length")

    def __init__(self, status: int, headers: dict[str, str], http11: bool) -> None:
        self.chunked = False
        self.length: int | None = None
        keep = http11 and "close" not in headers.get("connection", "").lower()
        te = headers.get("transfer-encoding")
        if status in (204, 304):
            self.length = 0
        elif te is not None:
            self.chunked = te.rsplit(",", 1)[-1].strip().lower() == "chunked"
            keep = keep and self.chunked and "content-length" not in headers
        elif (cl := headers.get("content-length")) is not None:
            values = {v.strip() for v in cl.split(",")}
            value = values.pop()
            if values or not value.isascii() or not value.isdigit() or len(value) > 18:
                raise _bad("Content-Length")
            self.length = int(value)
        self.keep = keep and (self.chunked or self.length is not None)


async def read_body(conn: Conn, start: int, framing: Framing, max_bytes: int, hold: Reservation | None) -> bytearray:
    """The body after the head (at `start` of `conn.buf`), framed as `framing` says; too_large past
    `max_bytes`, truncated when the connection ends early or the framing is broken. Clears
    `framing.keep` when more bytes came than the response holds."""
    if framing.length is not None and framing.length > max_bytes:
        raise ScrapeError("too_large", f"Content-Length {framing.length} > {max_bytes}")
    if framing.chunked:
        conn.cap, conn.cap_error = max_bytes + 2 * MAX_HEAD_BYTES, ("too_large", f"body exceeds {max_bytes} bytes")
        return await _read_chunked(conn, start, max_bytes, framing, hold)
    if hold is not None and len(conn.buf) > start:
        hold.take(len(conn.buf) - start)
    conn.hold = hold  # from now on each byte is charged as it arrives
    n = framing.length
    conn.cap = start + (max_bytes if n is None else n + MAX_HEAD_BYTES)
    conn.cap_error = ("too_large", f"body exceeds {max_bytes} bytes")
    if n is None:  # to the end of the connection
        while not conn.done:
            await conn.wait(_NO_WANT)
    else:
        while len(conn.buf) < start + n and not conn.done:
            await conn.wait(start + n)
    if conn.failure is not None:
        raise conn.failure
    body = conn.buf
    conn.buf = bytearray()
    del body[:start]  # from the front of a bytearray: no copy
    if n is None:
        if conn.lost is not None:
            raise ScrapeError("truncated", "connection reset before the end of the body")
        return body
    if len(body) < n:
        raise ScrapeError("truncated", f"connection closed after {len(body)} of {n} body bytes")
    if len(body) > n:
        framing.keep = False
        del body[n:]
    return body


def _chunk_size(line: bytes, have: int, max_bytes: int) -> int:
    """A chunk-size line's size (extensions ignored); the body so far is `have` bytes."""
    if len(line) > MAX_CHUNK_LINE:
        raise ScrapeError("truncated", f"chunk-size line over {MAX_CHUNK_LINE} bytes")
    digits = line.partition(b";")[0].strip(b" \t")
    if not digits or len(digits) > 15 or digits.strip(b"0123456789abcdefABCDEF"):
        raise ScrapeError("truncated", "chunk size is not hex")
    size = int(digits, 16)
    if have + size > max_bytes:
        raise ScrapeError("too_large", f"body exceeds {max_bytes} bytes")
    return size


async def _read_chunked(conn: Conn, pos: int, max_bytes: int, framing: Framing, hold: Reservation | None) -> bytearray:
    """A chunked body. The reader wakes on every read here and charges `hold` for the chunk data that
    arrived (never the framing), so at most one read's bytes are held uncharged."""
    body = bytearray()
    buf = conn.buf
    size = -1  # -1: a size line is next; -2: trailers; else a chunk of `size` bytes and its CRLF
    paid = pos  # the current chunk's bytes before this offset of `buf` are charged
    while True:
        if size < 0 and (eol := buf.find(b"\r\n", pos)) >= 0:
            if size == -1:
                size = _chunk_size(bytes(buf[pos:eol]), len(body), max_bytes) or -2
            elif eol == pos:  # the empty line after the last chunk (and its trailers)
                framing.keep = framing.keep and len(buf) == eol + 2
                conn.buf = bytearray()
                return body
            pos = paid = eol + 2
            continue
        if size >= 0 and hold is not None and (upto := min(len(buf), pos + size)) > paid:
            hold.take(upto - paid)
            paid = upto
        if size >= 0 and len(buf) >= pos + size + 2:
            if buf[pos + size : pos + size + 2] != b"\r\n":
                raise ScrapeError("truncated", "chunk not followed by CRLF")
            body += memoryview(buf)[pos : pos + size]
            pos, size = pos + size + 2, -1
            continue
        if size < 0 and len(buf) - pos > (MAX_CHUNK_LINE if size == -1 else MAX_HEAD_BYTES):
            raise ScrapeError("truncated", f"chunk-size or trailer line over {MAX_CHUNK_LINE} bytes")
        del buf[:pos]  # what was read goes: the buffer holds at most one chunk
        paid, pos = max(0, paid - pos), 0
        if conn.done:
            raise conn.failure or ScrapeError("truncated", "connection closed inside a chunked body")
        await conn.wait(len(buf) + 1)


def decode(body: bytearray, encoding: str, max_bytes: int, hold: Reservation | None) -> bytes | bytearray:
    """The body with its Content-Encoding (gzip or deflate) undone, capped at `max_bytes` decompressed."""
    enc = encoding.strip().lower()
    if enc in ("", "identity"):
        return body
    if enc in ("gzip", "x-gzip"):
        wbits = 31
    elif enc == "deflate":  # zlib-wrapped as the RFC says, or raw as some servers send it
        wbits = 15 if len(body) > 1 and body[0] & 0x0F == 8 and (body[0] << 8 | body[1]) % 31 == 0 else -15
    else:
        raise ScrapeError("parse", f"unsupported Content-Encoding {encoding[:40]!r}")
    d = zlib.decompressobj(wbits)
    try:
        out = d.decompress(body, max_bytes + 1)
    except zlib.error as e:
        raise ScrapeError("truncated", f"{enc} body does not decompress: {e}") from None
    if len(out) > max_bytes:
        raise ScrapeError("too_large", f"decompressed body exceeds {max_bytes} bytes")
    if not d.eof:
        raise ScrapeError("truncated", f"{enc} body cut short")
    if hold is not None and out:
        hold.take(len(out))
    return out

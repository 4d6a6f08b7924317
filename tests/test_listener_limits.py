"""The exporter's listener has limits: a connection cap (per client too), a header read timeout that
covers the TLS handshake, a header size cap, and malformed requests answered 400 with one DEBUG line and
no traceback. Hostile clients are real sockets on loopback; every wait is bounded."""

from __future__ import annotations

import asyncio
import logging
import ssl
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from aiohttp import web

from kvoffload_exporter.commands.serve import bind
from kvoffload_exporter.config.settings import Config
from kvoffload_exporter.enums import HttpRejectReason
from kvoffload_exporter.server.app import make_app
from kvoffload_exporter.server.guards import GuardStats
from kvoffload_exporter.server.listener import GuardedSite, ListenLimits

FIX = Path(__file__).parent / "fixtures" / "webconfig"
LIMITS = ListenLimits(max_connections=40, header_timeout=0.5, max_header_bytes=32 * 1024, write_timeout=0.5)
BIG = b"x" * (64 << 20)  # more than loopback's socket buffers: a client that does not read stalls the write


async def _big(request: web.Request) -> web.Response:
    return web.Response(body=BIG)


@dataclass
class Served:
    port: int
    guards: GuardStats
    tls: ssl.SSLContext | None

    async def open(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        return await asyncio.open_connection("127.0.0.1", self.port, ssl=self.client_tls())

    def client_tls(self) -> ssl.SSLContext | None:
        if self.tls is None:
            return None
        return ssl.create_default_context(cafile=str(FIX / "ca.crt"))

    async def get(self, path: str = "/healthz") -> bytes:
        tls = self.client_tls()
        reader, writer = await asyncio.open_connection("127.0.0.1", self.port, ssl=tls)
        writer.write(f"GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".encode())
        data = await asyncio.wait_for(reader.read(), 10)
        writer.close()
        return data


def _server_tls() -> ssl.SSLContext:
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.load_cert_chain(str(FIX / "server.crt"), str(FIX / "server.key"))
    return ctx


@pytest.fixture(params=["plain", "tls"])
async def served(request: pytest.FixtureRequest) -> AsyncIterator[Served]:
    guards = GuardStats()
    app = make_app(Config(gpu_enabled=False, host_enabled=False), guards=guards)
    app.router.add_get("/big", _big)
    runner = web.AppRunner(app, access_log=None, handle_signals=False, **LIMITS.runner_kwargs(guards))
    await runner.setup()
    sock = bind("127.0.0.1:0")
    tls = _server_tls() if request.param == "tls" else None
    site = GuardedSite(runner, sock, guards, LIMITS, ssl_context=tls)
    await site.start()
    try:
        yield Served(sock.getsockname()[1], guards, tls)
    finally:
        await runner.cleanup()


async def _closed_by_server(reader: asyncio.StreamReader) -> bool:
    try:
        return await asyncio.wait_for(reader.read(), 10) in (b"",) or True
    except (ConnectionError, ssl.SSLError):
        return True


async def _raw(port: int, source: str = "127.0.0.1") -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """Plain TCP even on the TLS listener (a stalled handshake), from `source` (127.0.0.x: another client)."""
    return await asyncio.open_connection("127.0.0.1", port, local_addr=(source, 0))


async def test_idle_and_half_sent_connections_are_closed_after_the_header_timeout(served: Served) -> None:
    idle = [await _raw(served.port) for _ in range(5)]
    for _, w in idle[:2]:
        w.write(b"GET /metrics HTTP/1.1\r\nHost: x\r\n")  # never finished (on TLS: garbage before a handshake)
    for r, _ in idle:
        data = await asyncio.wait_for(r.read(), 10)  # bounded: the server must close first
        assert b"200 OK" not in data
    assert served.guards.rejected.get(HttpRejectReason.HEADER_TIMEOUT, 0) >= 3
    assert served.guards.connections <= 1
    assert b"200 OK" in await served.get()


async def test_a_slowloris_cannot_keep_its_connection(served: Served) -> None:
    if served.tls is not None:
        reader, writer = await served.open()
    else:
        reader, writer = await _raw(served.port)
    closed = False
    for ch in b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: " + b"a" * 200:
        try:
            writer.write(bytes([ch]))
            await writer.drain()
        except (ConnectionError, ssl.SSLError):
            closed = True
            break
        await asyncio.sleep(0.05)  # 200 bytes × 50 ms = 10 s: far past the 0.5 s header timeout
        if reader.at_eof():
            closed = True
            break
    assert closed
    assert served.guards.rejected.get(HttpRejectReason.HEADER_TIMEOUT, 0) >= 1


async def test_the_connection_cap_holds_per_client_and_leaves_room_for_others(served: Served) -> None:
    hogs = [await _raw(served.port, "127.0.0.2") for _ in range(30)]  # a quarter of 40 = 10 per client
    await asyncio.sleep(0.1)
    assert served.guards.rejected.get(HttpRejectReason.CONNECTION_LIMIT, 0) >= 20
    assert served.guards.connections <= 10
    assert b"200 OK" in await served.get()  # Prometheus' address (127.0.0.1) still gets in
    for _, w in hogs:
        w.close()


async def test_headers_over_the_cap_get_431(served: Served) -> None:
    reader, writer = await served.open() if served.tls else await _raw(served.port)
    headers = "".join(f"X-H{i}: {'v' * 4000}\r\n" for i in range(12))  # 48 KB in lines aiohttp would accept
    writer.write(f"GET /healthz HTTP/1.1\r\nHost: x\r\n{headers}\r\n".encode())
    data = await asyncio.wait_for(reader.read(), 10)
    assert data.startswith(b"HTTP/1.1 431")
    assert served.guards.rejected.get(HttpRejectReason.BAD_REQUEST, 0) == 1


MALFORMED = {
    "http-9.9": b"GET / HTTP/9.9\r\nHost: x\r\n\r\n",
    "duplicate-length": b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nab",
    "long-url": b"GET /" + b"a" * 9000 + b" HTTP/1.1\r\nHost: x\r\n\r\n",
    "long-header": b"GET / HTTP/1.1\r\nHost: x\r\nX-A: " + b"a" * 9000 + b"\r\n\r\n",
    "crlf-in-name": b"GET / HTTP/1.1\r\nHo st: x\r\n\r\n",
    "bad-method": b"G(T / HTTP/1.1\r\nHost: x\r\n\r\n",
}


@pytest.mark.parametrize("case", list(MALFORMED))
async def test_malformed_requests_get_400_and_one_debug_line(
    served: Served, case: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    reader, writer = await served.open() if served.tls else await _raw(served.port)
    writer.write(MALFORMED[case])
    data = await asyncio.wait_for(reader.read(), 10)
    assert data.split(b"\r\n")[0].endswith(b"400 Bad Request")
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING], caplog.text
    assert not [r for r in caplog.records if r.exc_info], "no traceback"
    lines = [r for r in caplog.records if r.name == "kvoffload.listener"]
    assert len(lines) == 1 and "aaaa" not in lines[0].getMessage()
    assert served.guards.rejected.get(HttpRejectReason.BAD_REQUEST, 0) >= 1


async def test_a_client_that_stops_reading_is_dropped(served: Served) -> None:
    _reader, writer = await served.open() if served.tls else await _raw(served.port)
    writer.write(b"GET /big HTTP/1.1\r\nHost: x\r\n\r\n")
    for _ in range(500):  # bounded: 10 s; the client reads nothing meanwhile
        if served.guards.rejected.get(HttpRejectReason.WRITE_TIMEOUT):
            break
        await asyncio.sleep(0.02)
    assert served.guards.rejected.get(HttpRejectReason.WRITE_TIMEOUT) == 1
    for _ in range(100):  # the abort reaches connection_lost a few loop turns later (TLS: through its layer)
        if served.guards.connections == 0:
            break
        await asyncio.sleep(0.02)
    assert served.guards.connections == 0
    writer.close()

"""Connection slots a few addresses cannot take from Prometheus: a small per-address cap on half-open
connections, a reserve for addresses answered before, and a `/healthz` lane when every slot is taken.
Hostile clients are real sockets from 127.0.0.x on loopback; every wait is bounded."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
from aiohttp import web

from kvoffload_exporter.commands.serve import bind
from kvoffload_exporter.config.settings import Config
from kvoffload_exporter.enums import HttpRejectReason
from kvoffload_exporter.server.app import make_app
from kvoffload_exporter.server.connslots import MAX_PENDING_PER_CLIENT
from kvoffload_exporter.server.guards import GuardStats
from kvoffload_exporter.server.listener import GuardedSite, ListenLimits

LIMITS = ListenLimits(max_connections=64, header_timeout=5.0)  # a reserve of 8, 16 per address at most
HALF = b"GET /metrics HTTP/1.1\r\nHost: x\r\n"  # never finished


class Served:
    def __init__(self, port: int, guards: GuardStats, site: GuardedSite) -> None:
        self.port, self.guards, self.site = port, guards, site
        self.held: list[asyncio.StreamWriter] = []

    async def half_open(self, source: str, n: int) -> None:
        for _ in range(n):
            try:
                _, w = await asyncio.open_connection("127.0.0.1", self.port, local_addr=(source, 0))
                w.write(HALF)
                self.held.append(w)
            except OSError:
                pass
        await asyncio.sleep(0.02)  # the server has seen every connection (refused ones closed)

    async def get(self, path: str = "/healthz", source: str = "127.0.0.1") -> bytes:
        r, w = await asyncio.open_connection("127.0.0.1", self.port, local_addr=(source, 0))
        w.write(f"GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".encode())
        try:
            return await asyncio.wait_for(r.read(), 10)
        except ConnectionError:
            return b""
        finally:
            w.close()

    def refused(self) -> int:
        return self.guards.rejected.get(HttpRejectReason.CONNECTION_LIMIT, 0)


@pytest.fixture
async def served() -> AsyncIterator[Served]:
    guards = GuardStats()
    app = make_app(Config(gpu_enabled=False, host_enabled=False), guards=guards)
    runner = web.AppRunner(app, access_log=None, handle_signals=False, **LIMITS.runner_kwargs(guards))
    await runner.setup()
    sock = bind("127.0.0.1:0")
    site = GuardedSite(runner, sock, guards, LIMITS)
    await site.start()
    s = Served(sock.getsockname()[1], guards, site)
    try:
        yield s
    finally:
        for w in s.held:
            w.close()
        await runner.cleanup()


async def test_half_open_connections_per_address_are_a_small_absolute_number(served: Served) -> None:
    for i in range(2, 7):  # 5 addresses x 64 half-sent requests
        await served.half_open(f"127.0.0.{i}", 64)
    assert served.guards.connections == 5 * MAX_PENDING_PER_CLIENT  # not a quarter of the cap each
    assert served.refused() == 5 * (64 - MAX_PENDING_PER_CLIENT)
    assert b"200 OK" in await served.get(source="127.0.0.7")  # an address never seen still gets in


async def test_a_connection_whose_headers_arrived_is_no_longer_half_open(served: Served) -> None:
    kept = []
    for _ in range(MAX_PENDING_PER_CLIENT + 4):  # more kept-alive scrapes than the pending cap
        r, w = await asyncio.open_connection("127.0.0.1", served.port, local_addr=("127.0.0.2", 0))
        w.write(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        assert b"200 OK" in await asyncio.wait_for(r.readuntil(b"ok\n"), 10)
        kept.append(w)
    assert served.guards.connections == MAX_PENDING_PER_CLIENT + 4 and served.refused() == 0
    for w in kept:
        w.close()


async def test_an_address_answered_before_may_open_many_connections_at_once(served: Served) -> None:
    assert b"200 OK" in await served.get("/metrics")  # Prometheus, seen
    many = served.site.slots.per_client  # 16 here: twice the pending cap of an address never answered
    await served.half_open("127.0.0.1", many)  # e.g. many /probe at once, their headers on the way
    assert many > MAX_PENDING_PER_CLIENT and served.refused() == 0 and served.guards.connections == many


async def test_scrapers_seen_before_keep_a_reserve_when_many_addresses_fill_the_rest(served: Served) -> None:
    assert b"200 OK" in await served.get("/metrics")  # Prometheus (127.0.0.1), answered before the attack
    for i in range(10, 60):  # 50 addresses: more than the unreserved 56 slots
        await served.half_open(f"127.0.0.{i}", 4)
    assert served.guards.connections == LIMITS.max_connections - served.site.slots.reserve
    assert served.refused() > 0
    for _ in range(5):
        assert b"200 OK" in await served.get("/metrics")


async def test_healthz_is_answered_when_every_slot_is_taken(served: Served) -> None:
    for i in range(10, 60):
        await served.half_open(f"127.0.0.{i}", 8)
    await served.half_open("127.0.0.1", 8)  # the reserve too (an address seen before cannot be told apart)
    served.guards.trust("127.0.0.1")
    await served.half_open("127.0.0.1", 8)
    assert served.guards.connections == LIMITS.max_connections
    assert (await served.get(source="127.0.0.200")).startswith(b"HTTP/1.1 200 OK")
    assert (await served.get("/metrics", source="127.0.0.201")).startswith(b"HTTP/1.1 503")
    before = served.refused()
    assert (await served.get("/metrics", source="127.0.0.202")).startswith(b"HTTP/1.1 503")
    assert served.refused() == before + 1  # counted as connection_limit

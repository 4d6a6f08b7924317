"""Bodies held at once are bounded over every target: a poll that would pass the process budget fails
`too_large` (counted like the per-target cap), a body alone always fits, and the bytes come back."""

from __future__ import annotations

import asyncio

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from kvoffload_exporter.sources.vllm_http import BodyBudget, ScrapeError, fetch_metrics

BODY = "vllm:prefix_cache_hits_total 1\n" + "# filler\n" * 40_000  # ~360 KB


def test_a_reservation_alone_may_pass_the_budget_and_gives_everything_back() -> None:
    budget = BodyBudget(100)
    a, b = budget.reserve(), budget.reserve()
    a.take(80)
    a.take(80)  # alone: the largest allowed body is always readable
    with pytest.raises(ScrapeError) as e:
        b.take(1)
    assert e.value.reason == "too_large"
    a.release()
    a.release()  # idempotent
    b.take(100)
    assert (budget.used, budget.holders) == (100, 1)
    b.release()
    assert (budget.used, budget.holders) == (0, 0)


async def test_concurrent_bodies_past_the_budget_fail_too_large_and_release_their_bytes() -> None:
    gate = asyncio.Event()

    async def slow(request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Type": "text/plain"})
        await resp.prepare(request)
        data = BODY.encode()
        await resp.write(data[: len(data) // 2])
        await gate.wait()  # both polls hold half a body before either finishes
        await resp.write(data[len(data) // 2 :])
        return resp

    app = web.Application()
    app.router.add_get("/metrics", slow)
    server = TestServer(app, host="127.0.0.1")
    await server.start_server()
    budget = BodyBudget(len(BODY) * 3 // 2)  # room for one and a half bodies
    holds = [budget.reserve(), budget.reserve()]
    url = f"http://127.0.0.1:{server.port}"
    try:
        async with aiohttp.ClientSession() as s:
            tasks = [asyncio.ensure_future(fetch_metrics(s, url, 10.0, 1 << 24, None, h)) for h in holds]
            for _ in range(500):  # until both halves arrived
                if budget.used >= len(BODY) - 2:
                    break
                await asyncio.sleep(0.01)
            gate.set()
            results = await asyncio.gather(*tasks, return_exceptions=True)
    finally:
        await server.close()
    reasons = sorted(r.reason if isinstance(r, ScrapeError) else "ok" for r in results)
    assert reasons == ["ok", "too_large"]
    for h in holds:
        h.release()
    assert (budget.used, budget.holders) == (0, 0)


def test_reading_a_body_of_short_lines_never_holds_every_line_at_once() -> None:
    """8 MiB of 2 M lines no selector matches: parsing it allocates a block's lines at a time (a few
    MiB), not 2 M line objects (~110 MiB)."""
    import tracemalloc

    from kvoffload_exporter.ingest.normalise import normalise

    body = "a 1\n" * (2 * 2**20)
    tracemalloc.start()
    try:
        assert not normalise(body).families
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 16 * 2**20, f"{peak / 2**20:.0f} MiB allocated while reading an 8 MiB body"

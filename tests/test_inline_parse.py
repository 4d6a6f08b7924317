"""Where a poll parses: a real-size body on the event loop (the hop to a worker thread cost more than
the parse), a body over INLINE_PARSE_BYTES in a worker thread (the loop keeps its turns meanwhile)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from kvoffload_exporter.config.settings import Config, TargetConfig
from kvoffload_exporter.server import targetpoller
from kvoffload_exporter.server.targetpoller import INLINE_PARSE_BYTES, TargetPoller

TEXT = (Path(__file__).parent / "fixtures" / "h200-0.6b" / "A_12_final.prom").read_text()


async def _poll(body: str, monkeypatch: pytest.MonkeyPatch) -> tuple[TargetPoller, list[str]]:
    threaded: list[str] = []
    real = asyncio.to_thread

    async def to_thread(fn: Callable[..., Any], *args: Any) -> Any:
        threaded.append(getattr(fn, "__name__", "?"))
        return await real(fn, *args)

    monkeypatch.setattr(targetpoller.asyncio, "to_thread", to_thread)

    async def metrics(_r: web.Request) -> web.Response:
        return web.Response(text=body)

    async def version(_r: web.Request) -> web.Response:
        return web.json_response({"version": "0.26.0"})

    app = web.Application()
    app.router.add_get("/metrics", metrics)
    app.router.add_get("/version", version)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        p = TargetPoller(TargetConfig(url=f"http://127.0.0.1:{port}"), Config(max_body_bytes=4 << 20))
        async with aiohttp.ClientSession() as session:
            await p.poll_once(session)
    finally:
        await runner.cleanup()
    return p, threaded


async def test_a_real_size_body_is_parsed_on_the_loop(monkeypatch: pytest.MonkeyPatch) -> None:
    assert len(TEXT) < INLINE_PARSE_BYTES
    p, threaded = await _poll(TEXT, monkeypatch)
    assert p.view.up and p.view.snapshot is not None
    assert "_parse_all" not in threaded


async def test_a_body_over_the_inline_size_is_parsed_in_a_worker_thread(monkeypatch: pytest.MonkeyPatch) -> None:
    padding = "".join(f"# HELP python_padding_{i} {'x' * 100}\n" for i in range(INLINE_PARSE_BYTES // 100))
    body = padding + TEXT
    assert len(body) > INLINE_PARSE_BYTES
    p, threaded = await _poll(body, monkeypatch)
    assert p.view.up and p.view.snapshot is not None
    assert "_parse_all" in threaded

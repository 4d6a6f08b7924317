"""Test support: drive a real Exporter through a chain of captures on a manual clock.

A fake vLLM serves one capture per poll; wall clock and poll timer advance 5 s per poll and never
read the machine's time, so the exposition is byte-for-byte reproducible.
"""

from __future__ import annotations

from collections.abc import Sequence

import aiohttp
from aiohttp import web
from aiohttp.test_utils import TestServer

from kvoffload_exporter.config.settings import Config, TargetConfig
from kvoffload_exporter.server.exporter import Exporter

START = 1_700_000_000.0
STEP = 5.0


class ManualClock:
    def __init__(self, t: float = START) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


class ChainServer:
    """Serves `texts` in order on /metrics (the last one again when exhausted) and a fixed /version."""

    def __init__(self, texts: Sequence[str], version: str) -> None:
        self.texts = list(texts)
        self.version = version
        self.served = 0
        self.server: TestServer | None = None

    async def _metrics(self, request: web.Request) -> web.Response:
        text = self.texts[min(self.served, len(self.texts) - 1)]
        self.served += 1
        return web.Response(text=text, content_type="text/plain")

    async def _version(self, request: web.Request) -> web.Response:
        return web.json_response({"version": self.version})

    async def __aenter__(self) -> str:
        app = web.Application()
        app.router.add_get("/metrics", self._metrics)
        app.router.add_get("/version", self._version)
        self.server = TestServer(app)
        await self.server.start_server()
        return f"http://127.0.0.1:{self.server.port}"

    async def __aexit__(self, *exc: object) -> None:
        assert self.server is not None
        await self.server.close()


async def run_chain(texts: Sequence[str], version: str, name: str = "vllm-0") -> Exporter:
    """Poll once per capture; returns the exporter (runtime collectors off: they read this process)."""
    clock = ManualClock()
    async with ChainServer(texts, version) as url:
        config = Config(
            targets=(TargetConfig(url=url, name=name),), host_enabled=False, gpu_enabled=False, window=300.0
        )
        exp = Exporter(config, clock=clock, timer=clock, runtime_metrics=False)
        async with aiohttp.ClientSession() as session:
            for _ in texts:
                await exp.scheduler.poll(exp.targets[0], session)
                clock.t += STEP
    return exp

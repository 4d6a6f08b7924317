"""Bounded waits on an exporter under test: poll counts, never wall-clock assertions."""

from __future__ import annotations

import asyncio

from aiohttp.test_utils import TestClient

from kvoffload_exporter.server.app import EXPORTER


async def metrics_after_polls(client: TestClient, polls: int = 2, tries: int = 200) -> str:
    """The `/metrics` body once every target has been polled `polls` times (or after `tries` short waits)."""
    exp = client.server.app[EXPORTER]
    for _ in range(tries):
        if min(t.polls for t in exp.targets) >= polls:
            break
        await asyncio.sleep(0.02)
    return await (await client.get("/metrics")).text()

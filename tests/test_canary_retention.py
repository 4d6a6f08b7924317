"""Retention horizon on the simulator: the wait ladder exports the largest idle time after which a
displaced prefix still loaded from the tier (kvoffload_tier_retention_seconds), and none when the tier
lost it. Assertions are on classifications and idle steps, never on timings."""

from __future__ import annotations

from typing import Any

import aiohttp

from kvoffload_exporter.canary.cycle.engine import CanaryEngine
from kvoffload_exporter.canary.cycle.plan import Prompts
from kvoffload_exporter.canary.expose import render
from kvoffload_exporter.canary.wire.client import CanaryClient
from kvoffload_exporter.expose.render import Exposition
from tests.support.prom import samples
from tests.test_canary_sim import Sim, evicting_sleep, session, settings

__all__ = ["session"]  # the fixture, re-used

BPT = 114688  # KV bytes per token of the h200-qwen3-0.6b calibration


async def _wait_cycle(session: aiohttp.ClientSession, **engine: Any) -> CanaryEngine:
    """One wait-strategy cycle; users' traffic (sent from the sleep hook) evicts the prefix from the GPU
    once it has idled 0.4 simulated seconds."""
    async with Sim(calibration="h200-qwen3-0.6b", engine=engine) as sim:
        users = CanaryClient(session)
        sleep = evicting_sleep(users, sim.url)

        e = CanaryEngine(
            sim.url,
            settings(strategy="wait", allow_pressure=False, wait_initial=0.1, wait_max=2.0),
            CanaryClient(session),
            Prompts(b"s" * 32, "retention"),
            sleep=sleep,
        )
        await e.run_cycle()
    return e


def _retention(e: CanaryEngine) -> list[float]:
    x = Exposition()
    render(x, [e.state])
    return [s.value for s in samples(x.text()) if s.name == "kvoffload_tier_retention_seconds"]


async def test_retention_is_the_largest_idle_still_loaded(session: aiohttp.ClientSession) -> None:
    e = await _wait_cycle(session)
    assert list(e.state.tier_revisits) == [(0.4, True)]
    assert e.state.retention_seconds() == 0.4
    assert _retention(e) == [0.4]


async def test_a_tier_that_lost_the_prefix_has_no_retention(session: aiohttp.ClientSession) -> None:
    e = await _wait_cycle(session, cpu_bytes=6000 * BPT)  # the users' 15,000 tokens evict it from the tier
    assert list(e.state.tier_revisits) == [(0.4, False)]
    assert e.state.retention_seconds() is None
    assert _retention(e) == []

"""serve --canary.enabled under load: each cycle records the users' running/waiting requests of its closing
scrape, files its TTFTs under a load band (closed set, documented thresholds) and exports ΔTTFT per band.
The simulator's scrape is the real path; the running gauge is raised by a client wrapper so that the
same cycles run "under load" without timing-dependent background traffic."""

from __future__ import annotations

import re
from typing import Any

import aiohttp
import pytest

from kvoffload_exporter.canary import schedule
from kvoffload_exporter.canary.cycle.engine import CanaryEngine
from kvoffload_exporter.canary.cycle.plan import Prompts
from kvoffload_exporter.canary.cycle.records import HIGH_RUNNING, CycleLoad, load_band
from kvoffload_exporter.canary.expose import render
from kvoffload_exporter.canary.types import LoadBand
from kvoffload_exporter.canary.wire.client import CanaryClient
from kvoffload_exporter.expose.render import Exposition
from kvoffload_exporter.ingest.snapshot import EngineSignals, Generation, Snapshot
from tests.support.prom import samples
from tests.test_canary_sim import Sim, session, settings

__all__ = ["session"]  # the fixture, re-used


def test_band_thresholds() -> None:
    assert load_band(0, 0) == LoadBand.IDLE
    assert load_band(1, 0) == LoadBand.LOW
    assert load_band(HIGH_RUNNING - 1, 0) == LoadBand.LOW
    assert load_band(HIGH_RUNNING, 0) == LoadBand.HIGH
    assert load_band(0, 1) == LoadBand.HIGH  # a queue is where loads convoy


def test_cycle_load_sums_the_model_engines_only() -> None:
    def eng(model: str, n: str, running: float | None, waiting: float | None) -> EngineSignals:
        return EngineSignals(model, n, {}, requests_running=running, requests_waiting=waiting)

    snap = Snapshot(Generation.FLAT, (eng("m", "0", 3, 0), eng("m", "1", 4, 1), eng("other", "0", 50, 50)))
    assert schedule.cycle_load(snap, "m") == CycleLoad(7, 1)
    assert schedule.cycle_load(Snapshot(Generation.FLAT, (eng("m", "0", None, None),)), "m") is None
    assert schedule.cycle_load(None, "m") is None


class Loaded:
    """The canary's client, with `vllm:num_requests_running` of every /metrics raised to `running`."""

    def __init__(self, inner: CanaryClient) -> None:
        self.inner, self.running = inner, 0

    async def metrics(self, base_url: str) -> str:
        text = await self.inner.metrics(base_url)
        if not self.running:
            return text
        return re.sub(r"^(vllm:num_requests_running\{[^}]*\}) \S+$", rf"\1 {self.running}.0", text, flags=re.M)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


class Stop(Exception):
    pass


async def test_serve_cycles_are_filed_by_load_band(session: aiohttp.ClientSession) -> None:
    async with Sim(calibration="h200-qwen3-0.6b", version="0.32.0") as sim:
        client = Loaded(CanaryClient(session))
        e = CanaryEngine(
            sim.url,
            settings(min_samples=3, interval=0.01, recompute_control=False),
            client,  # type: ignore[arg-type]
            Prompts(b"s" * 32, "bands"),
        )
        done = 0

        def on_cycle() -> None:
            nonlocal done
            done += 1
            client.running = 16 if done >= 4 else 0  # cycles 1-4 idle, 5-8 under load
            if done == 8:
                raise Stop

        with pytest.raises(Stop):
            await schedule.run_forever(e, on_cycle)
    st = e.state
    assert [c.load.band if c.load else None for c in e.cycles] == [LoadBand.IDLE] * 4 + [LoadBand.HIGH] * 4
    assert dict(st.band_cycles) == {LoadBand.IDLE: 4, LoadBand.HIGH: 4} and st.load_band == LoadBand.HIGH
    x = Exposition()
    render(x, [st])
    got = samples(x.text())
    bands = {s.labels["load_band"] for s in got if s.name == "kvoffload_canary_band_delta_ttft_seconds"}
    assert bands == {"idle", "high"}
    hot = [s.labels["load_band"] for s in got if s.name == "kvoffload_canary_load_band" and s.value == 1.0]
    assert hot == ["high"]

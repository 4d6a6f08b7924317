"""The simulator reports the same engine activity as each backend would (SimpleCPU blocks, tiering per
tier with a slow fs tier shedding writes, LMCache tokens), and the exporter and the canary read each.

Why: the canary classified a revisit as an offload hit only from load *bytes*; SimpleCPU and LMCache
count no bytes, so a healthy tier read as "no load" there. Assertions are on classifications, never timings.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import aiohttp
import pytest
from test_canary_sim import Sim, engine, phases

from kvoffload_exporter.derive.window import interval
from kvoffload_exporter.enums import Signal
from kvoffload_exporter.ingest.backends import Backend, Evidence
from kvoffload_exporter.ingest.normalise import normalise
from kvoffload_exporter.sim.backends import OFFLOAD_BACKENDS
from kvoffload_exporter.sim.simulator import SimOptions, Simulator

BACKENDS = OFFLOAD_BACKENDS
"""Simulated backends that are an offload tier, by the exporter's names (HiSparse is not: tested on its own)."""


@pytest.fixture
async def session() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as s:
        yield s


@pytest.mark.parametrize("backend", sorted(BACKENDS))
def test_simulated_body_resolves_to_its_backend(backend: str) -> None:
    sim = Simulator(SimOptions(version="0.33.0", backend=backend, seed=1, time_scale=0.01))
    snap = normalise(sim.metrics_text())
    assert snap.backends == (Backend(backend),) and snap.offload_configured


def test_unknown_backend_is_one_clear_error() -> None:
    assert any("unknown backend 'nope'" in e for e in SimOptions(backend="nope").check())


@pytest.mark.parametrize("backend", sorted(BACKENDS))
async def test_canary_sees_the_offload_hit_on_every_backend(session: aiohttp.ClientSession, backend: str) -> None:
    async with Sim(calibration="h200-qwen3-0.6b", version="0.33.0", backend=backend) as sim:
        e = engine(session, sim.url, recompute_control=False)
        before = normalise(sim.sim.metrics_text())
        await e.run_cycle()
        after = normalise(sim.sim.metrics_text())
    assert ("offload_revisit", "offload_hit") in phases(e, 1)
    assert e.cycles[0].result == "offload_hit"
    (d,) = interval(before, after).values()
    assert d.state == "hit"
    loaded = {k.unit for k, v in d.evidence.items() if k.signal == Evidence.LOADED and v > 0}
    assert loaded == {
        "bytes"
        if backend in (Backend.NATIVE, Backend.TIERING, Backend.MOONCAKE_STORE, Backend.UMBP)
        else "tokens"
        if backend == "lmcache"
        else "blocks"
    }


@pytest.mark.parametrize("backend", sorted(BACKENDS))
async def test_store_without_load_on_every_backend(session: aiohttp.ClientSession, backend: str) -> None:
    async with Sim(
        calibration="h200-qwen3-0.6b", version="0.33.0", backend=backend, faults=("store-without-load",)
    ) as sim:
        e = engine(session, sim.url, recompute_control=False)
        await e.run_cycle()
    c = e.cycles[0]
    assert c.result != "offload_hit" and c.reason in ("no_load", "evicted_from_tier")


def test_tiering_sheds_writes_on_the_slow_tier() -> None:
    """The tiering profile's fs tier drops half its cascade writes: the drops alert has something to see."""
    sim = Simulator(SimOptions(version="0.33.0", backend="tiering", seed=1, time_scale=0.01))
    for e in sim.engines:
        e.stats.inc("kv_offload_store_bytes", 64 * 114_688 * 16)
    snap = normalise(sim.metrics_text())
    drops = {
        k.reason: v for k, v in snap.engines[0].evidence.items() if k.signal == Evidence.DROPPED and k.tier == "1:fs"
    }
    assert drops["backpressure"] > 0


def _offload_traffic(sim: Simulator) -> None:
    """A million computed prompt tokens per engine, 64 chunks stored and 32 loaded (the store-backed backends'
    bodies count them as their own puts and gets)."""
    for e in sim.engines:
        e.stats.inc("kv_offload_store_bytes", 64 * 114_688 * 16)
        e.stats.inc("kv_offload_load_bytes", 32 * 114_688 * 16)
        e.stats.inc("prompt_tokens", 1_000_000)
        e.stats.inc("prompt_tokens_by_source", 1_000_000, ("local_compute",))
        e.stats.observe("request_prefill_kv_computed_tokens", 1_000_000)


def test_mooncake_store_simulation_reads_as_hit_and_its_put_errors_as_store_errors() -> None:
    """The simulator's Mooncake store body: stores and loads read `hit` in bytes; with `store-errors` every
    put errors, its bytes sit under status="error", and the exporter reads `not_storing` / `store_errors`
    with nothing stored."""
    from kvoffload_exporter.derive.reasons import explain
    from kvoffload_exporter.ingest.backends import NativeUnit

    for faults, state in (((), "hit"), (("store-errors",), "not_storing")):
        sim = Simulator(
            SimOptions(version="0.33.0", backend=Backend.MOONCAKE_STORE, seed=1, time_scale=0.01, faults=faults)
        )
        before = normalise(sim.metrics_text())
        assert before.backends == (Backend.MOONCAKE_STORE,)
        _offload_traffic(sim)
        body = sim.metrics_text()
        after = normalise(body)
        (d,) = interval(before, after).values()
        assert d.state == state, faults
        stored = {k: v for k, v in d.evidence.items() if k.signal == Evidence.STORED}
        if faults:
            assert 'operation="save_put",status="error"} 117440512.0' in body
            assert set(stored.values()) == {0.0}
            assert explain(d, after.engines[0], after.families) == "store_errors"
        else:
            assert {k.unit for k, v in stored.items() if v > 0} == {NativeUnit.BYTES}


def test_umbp_simulation_reads_as_hit_and_its_failed_stores_as_store_errors() -> None:
    """The simulator's UMBP body: store/load bytes read `hit`; with `store-errors` every store fails (no bytes,
    failed objects) and the exporter reads `not_storing` / `store_errors`."""
    from kvoffload_exporter.derive.reasons import explain

    for faults, state in (((), "hit"), (("store-errors",), "not_storing")):
        sim = Simulator(SimOptions(version="0.33.0", backend="umbp", seed=1, time_scale=0.01, faults=faults))
        before = normalise(sim.metrics_text())
        _offload_traffic(sim)
        body = sim.metrics_text()
        after = normalise(body)
        (d,) = interval(before, after).values()
        assert d.state == state, faults
        if faults:
            assert (
                'vllm:umbp_transfer_failed_total{engine="0",model_name="Qwen/Qwen3-0.6B",operation="store"} 64.0'
                in body
            )
            assert explain(d, after.engines[0], after.families) == "store_errors"


def test_hisparse_simulation_exports_pages_and_reads_not_configured() -> None:
    """`--backend hisparse`: no offload tier (no kv_offload_* family, state not_configured), the HiSparse
    pages and host-to-device bytes grow with the decoded tokens."""
    sim = Simulator(SimOptions(version="0.33.0", backend="hisparse", seed=1, time_scale=0.01))
    assert not any(e.connector for e in sim.engines)
    for e in sim.engines:
        e.stats.inc("generation_tokens", 10)
    body = sim.metrics_text()
    snap = normalise(body)
    assert snap.backends == () and not snap.offload_configured
    assert "vllm:kv_offload_" not in body
    counters = snap.engines[0].counters
    assert counters[Signal.HISPARSE_CACHE_HITS] == 18000.0
    assert counters[Signal.HISPARSE_CACHE_MISSES] == 2480.0
    assert counters[Signal.HISPARSE_HOST_TO_DEVICE_BYTES] == 2480.0 * 36864

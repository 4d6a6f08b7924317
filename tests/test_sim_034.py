"""The simulator's vLLM 0.34 faults drive each new state reason and signal through the exporter's own reading:
a tiering fs tier whose promotions fail (`promotion_failures`), a Mooncake store whose gets fail
(`load_errors`), a secondary tier shedding cascades under backpressure (the engine still `hit`), requests
with NaN logits (`kvoffload_integrity_events_total{kind="nan_logits"}`). Assertions on what the exporter
concludes from two canary cycles of traffic, never on timings."""

from __future__ import annotations

from collections.abc import AsyncIterator

import aiohttp
import pytest
from test_canary_sim import Sim, engine

from kvoffload_exporter.derive.reasons import explain
from kvoffload_exporter.derive.window import EngineDerived, interval
from kvoffload_exporter.enums import State, StateReason
from kvoffload_exporter.ingest.backends import Evidence
from kvoffload_exporter.ingest.normalise import normalise
from kvoffload_exporter.ingest.snapshot import Snapshot
from kvoffload_exporter.sim.simulator import SimOptions, Simulator


@pytest.fixture
async def session() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as s:
        yield s


async def _two_cycles(
    session: aiohttp.ClientSession, backend: str, *faults: str
) -> tuple[EngineDerived, Snapshot, StateReason | None]:
    """One cycle so that the tier holds stores before the window, a second one inside it."""
    async with Sim(calibration="h200-qwen3-0.6b", version="0.34.0", backend=backend, faults=faults) as sim:
        e = engine(session, sim.url, recompute_control=False)
        await e.run_cycle()
        before = normalise(sim.sim.metrics_text())
        await e.run_cycle()
        after = normalise(sim.sim.metrics_text())
    ((key, d),) = interval(before, after).items()
    e_after = after.engine(key)
    assert e_after is not None
    return d, after, explain(d, e_after, after.families)


async def test_promotion_failures_on_a_tiering_fs_tier(session: aiohttp.ClientSession) -> None:
    d, after, reason = await _two_cycles(session, "tiering", "promotion-failures")
    assert d.state == State.STORE_WITHOUT_LOAD and reason == StateReason.PROMOTION_FAILURES
    assert any(v > 0 for k, v in d.evidence.items() if k.signal == Evidence.PROMOTION_FAILED and k.tier == "1:fs")
    assert "vllm:kv_offload_tiering_deferred_release_chunks" in after.families  # 0.34's gauge, by tier


async def test_load_errors_on_a_mooncake_store(session: aiohttp.ClientSession) -> None:
    d, _, reason = await _two_cycles(session, "mooncake_store", "load-errors")
    assert d.state == State.STORE_WITHOUT_LOAD and reason == StateReason.LOAD_ERRORS
    assert any(v > 0 for k, v in d.evidence.items() if k.signal == Evidence.LOAD_FAILED)


async def test_backpressure_sheds_cascades_while_the_engine_hits(session: aiohttp.ClientSession) -> None:
    d, _, reason = await _two_cycles(session, "tiering", "backpressure=0.9")
    assert d.state == State.HIT and reason is None  # the primary tier serves; the fs tier falls behind
    drops = sum(v for k, v in d.evidence.items() if k.signal == Evidence.DROPPED and k.reason == "backpressure")
    assert drops > 0


async def test_nan_logits_are_integrity_events(session: aiohttp.ClientSession) -> None:
    d, _, _ = await _two_cycles(session, "native", "nan-logits=1")
    events = {k.detail: v for k, v in d.evidence.items() if k.signal == Evidence.INTEGRITY}
    assert events.get("nan_logits", 0) > 0


def test_without_the_fault_there_is_no_corrupted_requests_family() -> None:
    """vLLM registers vllm:corrupted_requests only with VLLM_COMPUTE_NANS_IN_LOGITS=1."""
    sim = Simulator(SimOptions(version="0.34.0", seed=1, time_scale=0.01))
    assert "vllm:corrupted_requests" not in sim.metrics_text()


def test_the_simulated_range_reaches_0_34() -> None:
    assert not SimOptions(version="0.34.0").check()
    assert any("0.10–0.34" in e for e in SimOptions(version="0.35.0").check())

"""The canary engine against the built-in simulator (in-process, fast time scale): every phase's
classification, the recompute control per version, faults, concurrent traffic, budget and errors.

Assertions are on classifications, reasons and counters, never on timings.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import aiohttp
import pytest

from kvoffload_exporter.canary.config import CanarySettings
from kvoffload_exporter.canary.cycle.engine import CanaryEngine
from kvoffload_exporter.canary.cycle.plan import Prompts
from kvoffload_exporter.canary.wire.client import CanaryClient
from kvoffload_exporter.canary.wire.protocol import Completion
from kvoffload_exporter.sim.sender import send
from kvoffload_exporter.sim.server import start
from kvoffload_exporter.sim.simulator import SimOptions, Simulator
from kvoffload_exporter.sim.traffic import TrafficSpec

SCALE = 0.2  # simulated seconds run five times faster; classifications do not depend on time


class Sim:
    def __init__(self, **opts: Any):
        self.sim = Simulator(SimOptions(time_scale=opts.pop("time_scale", SCALE), seed=opts.pop("seed", 11), **opts))
        self.truth: list[Any] = []  # (request, plan) of canary-salted requests: the simulator's own view

    def record(self, salt: str) -> None:
        for eng in self.sim.engines:
            orig = eng.submit

            def submit(req: Any, now: Any = None, _orig: Any = orig) -> Any:
                plan = _orig(req, now)
                if req.cache_salt and req.cache_salt.startswith(salt):
                    self.truth.append((req, plan))
                return plan

            eng.submit = submit  # type: ignore[method-assign]

    async def __aenter__(self) -> Sim:
        self.runner, self.url = await start(self.sim)
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.runner.cleanup()


def settings(**kw: Any) -> CanarySettings:
    base: dict[str, Any] = {
        "enabled": True,
        "strategy": "pressure",
        "allow_pressure": True,
        "budget_tokens_per_hour": None,
        "settle": 0.01,
        "min_samples": 10,
        "max_samples": 1000,
        "backoff_initial": 0.01,
        "backoff_max": 0.05,
    }
    base.update(kw)
    return CanarySettings(**base)


@pytest.fixture
async def session() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as s:
        yield s


def engine(
    session: aiohttp.ClientSession, url: str, control: str | None = None, client: Any = None, **kw: Any
) -> CanaryEngine:
    return CanaryEngine(
        url, settings(**kw), client or CanaryClient(session), Prompts(b"s" * 32, "test"), control_url=control
    )


def phases(e: CanaryEngine, cycle: int) -> list[tuple[str, str | None]]:
    return [(p.phase, p.classification) for p in e.cycles[cycle - 1].phases]


def truth_of(plan: Any, prefix: int) -> str:
    if plan.external_hit >= prefix:
        return "offload_hit"
    if plan.gpu_hit >= prefix:
        return "gpu_hit"
    return "miss" if plan.cached == 0 else "partial"


async def test_healthy_tier_on_0_26_every_phase(session: aiohttp.ClientSession) -> None:
    async with (
        Sim(calibration="h200-qwen3-0.6b", version="0.26.0") as sim,
        Sim(calibration="h200-qwen3-0.6b", version="0.26.0", connector=False, seed=12) as ctl,
    ):
        e = engine(session, sim.url, ctl.url)
        cond = await e.prepare()
        assert cond.target.generation == "flat" and ctl.sim.config.connector is False
        assert cond.control is not None and cond.control.generation == "none"
        for _ in range(2):
            await e.run_cycle()
    # The probes after the displacement run in each round's recorded order (order.py), the phases as listed.
    expect = {"offload_revisit": "offload_hit", "recompute": "offload_hit", "cold": "miss", "control_target": "miss"}
    first = [("seed", "miss"), ("gpu_revisit", "gpu_hit"), ("seed_b", "miss"), ("displace", None)]
    assert sorted(e.cycles[0].order) == sorted(expect)
    # The output check's one sensitivity probe of the run ends the first round (outputcheck.py).
    assert phases(e, 1) == first + [(k, expect[k]) for k in e.cycles[0].order] + [("sensitivity", "miss")]
    # 0.26 ignores max_load_tokens: seen in the counters, so the control is dropped from cycle 2 on.
    assert e.state.recompute_control == "ignored"
    assert sorted(e.cycles[1].order) == ["cold", "control_target", "offload_revisit"]
    second = [("seed", "miss"), ("gpu_revisit", "gpu_hit"), ("displace", None)]
    assert phases(e, 2) == second + [(k, expect[k]) for k in e.cycles[1].order]
    for c in e.cycles:
        assert c.result == "offload_hit" and c.reason in ("ok", "loaded_but_slower")
        rev = next(p for p in c.phases if p.phase == "offload_revisit")
        assert rev.counted and rev.load_bytes == 5120 * 114_688 and rev.external_hit_tokens == 5120
        assert rev.cached_tokens == 5120
        seed = c.phases[0]
        assert seed.store_bytes >= 5120 * 114_688  # the store lag is absorbed by the flush request
    assert e.state.bytes_per_token == 114_688
    assert len(e.state.samples["offload_hit"]) == 2 and len(e.state.samples["control_target"]) == 2
    assert len(e.state.samples["recompute"]) == 0
    assert e.state.probes["offload_hit"] == 3 and e.state.probes["error"] == 0
    assert e.state.verdict is not None and e.state.verdict.verdict == "inconclusive"  # 2 < 10 samples


async def test_0_32_honours_max_load_tokens(session: aiohttp.ClientSession) -> None:
    async with Sim(calibration="h200-qwen3-32b", version="0.32.0") as sim:
        e = engine(session, sim.url)
        for _ in range(2):
            await e.run_cycle()
    for c in (1, 2):
        assert ("recompute", "miss") in phases(e, c)
    rc = [p for c in e.cycles for p in c.phases if p.phase == "recompute"]
    assert all(p.load_bytes == 0 and p.counted for p in rc)
    assert e.state.recompute_control == "honoured" and len(e.state.samples["recompute"]) == 2
    assert e.state.bytes_per_token == 262_144


async def test_store_without_load(session: aiohttp.ClientSession) -> None:
    async with Sim(calibration="h200-qwen3-0.6b", faults=("store-without-load",)) as sim:
        e = engine(session, sim.url, recompute_control=False)
        for _ in range(3):
            await e.run_cycle()
    for i in (1, 2, 3):
        probes = [(k, "miss") for k in e.cycles[i - 1].order]  # the revisit's place: the round's order
        assert sorted(e.cycles[i - 1].order) == ["cold", "offload_revisit"]
        assert phases(e, i) == [("seed", "miss"), ("gpu_revisit", "gpu_hit"), ("displace", None), *probes]
        assert e.cycles[i - 1].reason == "no_load"
        assert e.cycles[i - 1].phases[0].store_bytes > 0
    assert e.state.verdict is not None and e.state.verdict.verdict == "no_offload_hit"
    assert e.state.offload_attempts == 3


async def test_no_connector(session: aiohttp.ClientSession) -> None:
    async with Sim(calibration="h200-qwen3-0.6b", faults=("no-connector",)) as sim:
        e = engine(session, sim.url)
        for _ in range(3):
            await e.run_cycle()
    assert e.conditions is not None and e.conditions.target.generation == "none"
    for i in (1, 2, 3):
        c = e.cycles[i - 1]
        assert c.reason == "no_store" and c.result == "miss"
        assert dict(phases(e, i))["offload_revisit"] == "miss"
        assert all(p.load_bytes == 0 and p.store_bytes == 0 for p in c.phases)
    assert dict(phases(e, 1))["recompute"] == "miss"  # recomputes, but proves nothing without a tier
    assert e.state.verdict is not None and e.state.verdict.verdict == "no_offload_hit"


async def test_classifications_match_the_simulator_under_concurrent_traffic(session: aiohttp.ClientSession) -> None:
    async with Sim(calibration="h200-qwen3-0.6b") as sim:
        e = engine(session, sim.url, recompute_control=False)
        sim.record(e.prompts.salt)
        spec = TrafficSpec(
            rate=100.0,  # overlaps every phase: at 20/s a 10-15 ms phase window saw other traffic ~1 time in 2
            duration=60.0,
            groups=4,
            prefix_tokens=512,
            tail_tokens=64,
            max_tokens=2,
            max_prompt_tokens=2000,
            seed=3,
        )
        traffic = asyncio.create_task(send(sim.url, spec))
        try:
            for _ in range(3):
                await e.run_cycle()
        finally:
            traffic.cancel()
            await asyncio.gather(traffic, return_exceptions=True)
    probes = [r for r in e.requests if r.role == "target"]
    assert len(probes) == len(sim.truth)
    prefix = e.conditions.sizing.prefix_tokens  # type: ignore[union-attr]
    truth = [truth_of(plan, prefix) for (req, plan), r in zip(sim.truth, probes) if r.kind == "probe"]
    measured = [p for c in e.cycles for p in c.phases if p.phase != "displace"]
    assert len(truth) == len(measured)
    assert sum(p.other_traffic_tokens > 0 for p in measured) >= len(measured) // 2  # traffic really ran
    for t, p in zip(truth, measured):
        assert p.classification == t, (
            p.phase,
            p.classification,
            t,
            p.note,
            p.load_bytes,
            p.external_hit_tokens,
            p.gpu_hit_tokens,
            p.cached_tokens,
            p.other_traffic_tokens,
            e.state.bytes_per_token,
        )
    assert sum(p.classification == "offload_hit" for p in measured) >= 2


async def test_a_store_reported_late_does_not_inflate_bytes_per_token(session: aiohttp.ClientSession) -> None:
    """A user's request finishes before the canary's first read, but its store is reported only at the
    next engine step, inside the seed's window. Counted from that read, the straggler's bytes arrive
    without its prompt tokens: bytes per token would read 1.4x the truth and the full load of the
    offload revisit would look like a partial one (the flake CI saw under concurrent traffic)."""
    async with Sim(calibration="h200-qwen3-0.6b", engine={"store_report_delay_s": 0}) as sim:
        e = engine(session, sim.url, recompute_control=False)
        await e.prepare()
        straggler = {"prompt": list(range(100, 2148)), "max_tokens": 1, "cache_salt": "user"}
        async with session.post(sim.url + "/v1/completions", json=straggler) as resp:
            assert resp.status == 200
            await resp.read()
        await e.scrapes.scrape("target")  # the seed's "before": after the straggler's tokens, before its store
        await e.run_cycle()
    assert e.state.bytes_per_token == 114_688
    assert dict(phases(e, 1))["offload_revisit"] == "offload_hit"


async def test_budget_allows_whole_cycles_only(session: aiohttp.ClientSession) -> None:
    async with Sim(calibration="h200-qwen3-0.6b") as sim:
        probe = engine(session, sim.url)
        await probe.prepare()
        cost = probe.cycle_cost()
        e = engine(session, sim.url, budget_tokens_per_hour=cost + 1000)
        first = await e.run_cycle()
        second = await e.run_cycle()
        tiny = engine(session, sim.url, budget_tokens_per_hour=cost - 1)
        none = await tiny.run_cycle()
    assert first is not None and first.reason != "error"
    assert second is None and none is None
    assert tiny.state.tokens_spent == 0 and tiny.requests == []
    spent = sum(
        (r.usage or {}).get("prompt_tokens", 0) + (r.usage or {}).get("completion_tokens", 0) for r in e.requests
    )
    assert e.state.tokens_spent == spent and 0 < spent <= cost
    assert e.state.budget_remaining == cost + 1000 - spent


class FailOnce:
    """A transport that answers one completion with an HTTP error, like an overloaded server."""

    def __init__(self, inner: CanaryClient, fail_at: int, status: int = 503, retry_after: float | None = None):
        self.inner, self.fail_at, self.status, self.retry_after, self.n = inner, fail_at, status, retry_after, 0

    async def complete(self, url: str, body: dict[str, Any]) -> Completion:
        self.n += 1
        if self.n == self.fail_at:
            return Completion(
                status=self.status, error="http_429" if self.status == 429 else "http_5xx", retry_after=self.retry_after
            )
        return await self.inner.complete(url, body)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


async def test_server_error_mid_cycle_then_recovery(session: aiohttp.ClientSession) -> None:
    async with Sim(calibration="h200-qwen3-0.6b") as sim:
        client = FailOnce(CanaryClient(session), fail_at=9, status=429, retry_after=3.0)
        e = engine(session, sim.url, client=client, recompute_control=False)
        bad = await e.run_cycle()
        good = await e.run_cycle()
    assert bad is not None and bad.reason == "error" and "http_429" in bad.detail
    assert e.retry_after == 3.0
    assert [p.phase for p in bad.phases][:2] == ["seed", "gpu_revisit"]  # what ran before the failure
    assert good is not None and good.reason != "error" and good.result == "offload_hit"
    assert e.state.cycles["error"] == 1 and e.state.probes["error"] == 1
    assert e.state.last_success == good.finished


async def test_metrics_failure_mid_cycle(session: aiohttp.ClientSession) -> None:
    async with Sim(calibration="h200-qwen3-0.6b") as sim:

        def progress(kind: str, obj: Any) -> None:
            if kind == "phase" and obj.phase == "displace" and obj.cycle == 1:
                sim.sim.update_faults(add=["metrics-500"])

        e = engine(session, sim.url, recompute_control=False)
        e.progress = progress
        bad = await e.run_cycle()
        sim.sim.update_faults(remove=["metrics-500"])
        good = await e.run_cycle()
    assert bad is not None and bad.reason == "error" and "/metrics" in bad.detail
    assert good is not None and good.reason != "error"
    assert e.state.cycles["error"] == 1 and e.state.last_success == good.finished


def evicting_sleep(users: CanaryClient, url: str) -> Callable[[float], Awaitable[None]]:
    """A canary `sleep` hook standing in for users' traffic: an idle gap of 0.4 simulated seconds or more is
    filled with three salted 5,000-token requests, enough to evict the canary's prefix from the GPU."""
    sent = 0

    async def sleep(seconds: float) -> None:
        nonlocal sent
        await asyncio.sleep(0)
        if seconds >= 0.4:
            for _ in range(3):
                sent += 1
                body = {
                    "prompt": list(range(2000 + sent * 10, 2000 + sent * 10 + 5000)),
                    "max_tokens": 1,
                    "stream": True,
                    "stream_options": {"include_usage": True},
                    "cache_salt": f"user{sent}",
                }
                assert (await users.complete(url, body)).ok

    return sleep


async def test_wait_strategy_measures_residency(session: aiohttp.ClientSession) -> None:
    """Users' traffic (sent from the sleep hook) evicts the prefix once it has idled long enough."""
    async with Sim(calibration="h200-qwen3-0.6b") as sim:
        users = CanaryClient(session)
        sleep = evicting_sleep(users, sim.url)

        e = CanaryEngine(
            sim.url,
            settings(strategy="wait", allow_pressure=False, wait_initial=0.1, wait_max=2.0),
            CanaryClient(session),
            Prompts(b"s" * 32, "wait"),
            sleep=sleep,
        )
        rec = await e.run_cycle()
    assert rec is not None and rec.strategy == "wait"
    revisits = [(p.idle_seconds, p.classification) for p in rec.phases if p.phase == "wait_revisit"]
    assert revisits == [(0.1, "gpu_hit"), (0.2, "gpu_hit"), (0.4, "offload_hit")]
    assert e.state.residency == {"gpu": 0.2, "offload": 0.4}
    assert rec.result == "offload_hit" and e.state.offload_attempts == 1


async def test_wait_strategy_not_displaced(session: aiohttp.ClientSession) -> None:
    async with Sim(calibration="h200-qwen3-0.6b") as sim:

        async def sleep(seconds: float) -> None:
            await asyncio.sleep(0)

        e = CanaryEngine(
            sim.url,
            settings(strategy="wait", allow_pressure=False, wait_initial=1.0, wait_max=4.0, recompute_control=False),
            CanaryClient(session),
            Prompts(b"s" * 32, "idle"),
            sleep=sleep,
        )
        rec = await e.run_cycle()
    assert rec is not None and rec.reason == "not_displaced" and rec.result == "gpu_hit"
    assert [p.idle_seconds for p in rec.phases if p.phase == "wait_revisit"] == [1.0, 2.0, 4.0]
    assert e.state.offload_attempts == 0 and e.state.residency == {"gpu": 4.0}

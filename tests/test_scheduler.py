"""The poll loop's schedule on simulated time: a poll slower than the interval skips the slots it missed
and keeps the loop's phase, instead of polling back to back until it has caught up.

Why: the skip could be removed with every test green. Simulated time: the loop's sleeps and each poll move
a manual clock; nothing here waits for real time."""

from __future__ import annotations

import asyncio
import heapq
import itertools
import math
import random
from typing import Any

import pytest

from kvoffload_exporter.config.settings import Config, TargetConfig
from kvoffload_exporter.server import scheduler as scheduler_module
from kvoffload_exporter.server.exporter import Exporter


class _Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


async def test_a_poll_slower_than_the_interval_skips_the_missed_slots_and_keeps_the_phase(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    clock = _Clock()
    real_sleep = asyncio.sleep

    async def sleep(seconds: float) -> None:
        clock.t += max(0.0, seconds)
        await real_sleep(0)

    monkeypatch.setattr(scheduler_module.asyncio, "sleep", sleep)
    config = Config(
        targets=(TargetConfig(url="http://a:8000"),), poll_interval=1.0, host_enabled=False, gpu_enabled=False
    )
    exp = Exporter(config, clock=clock, timer=clock, runtime_metrics=False, rng=random.Random(0))
    target, starts = exp.targets[0], []

    async def poll_once(session: Any) -> float:  # each poll takes 2.5 intervals
        starts.append(clock.t)
        clock.t += 2.5
        await real_sleep(0)
        return 2.5

    monkeypatch.setattr(target, "poll_once", poll_once)
    loop = asyncio.ensure_future(exp.scheduler.target_loop(target, None, first=False))  # type: ignore[arg-type]
    while len(starts) < 6:
        await real_sleep(0)
    loop.cancel()
    phase = starts[0]
    assert 0.0 <= phase < 2.0  # a random moment of the first interval, then the next wave's
    # Started on the next free slot of the original phase: every third one, never 2.5 s apart.
    assert [round(t - phase, 9) for t in starts[:6]] == [0.0, 3.0, 6.0, 9.0, 12.0, 15.0]


class _Simulated:
    """Discrete-event time for many loops at once: each sleep waits until the clock reaches its end."""

    def __init__(self, clock: _Clock) -> None:
        self.clock = clock
        self.real_sleep = asyncio.sleep  # captured before the scheduler's sleep is replaced
        self.sleepers: list[tuple[float, int, asyncio.Future[None]]] = []
        self.sleeps = 0

    async def sleep(self, seconds: float) -> None:
        self.sleeps += 1
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        heapq.heappush(self.sleepers, (self.clock.t + max(0.0, seconds), id(fut), fut))
        await fut

    async def run_until(self, end: float) -> None:
        while True:
            for _ in range(5):  # let every woken loop run up to its next sleep
                await self.real_sleep(0)
            if not self.sleepers or self.sleepers[0][0] > end:
                return
            self.clock.t, _, fut = heapq.heappop(self.sleepers)
            fut.set_result(None)


async def _starts_by_target(
    monkeypatch: pytest.MonkeyPatch, n: int, until: float, sim: _Simulated | None = None
) -> dict[int, list[float]]:
    """Every target's poll start times (simulated) over `until` seconds of a fleet of `n` at 1 s polls."""
    sim = sim or _Simulated(_Clock())
    clock = sim.clock
    monkeypatch.setattr(scheduler_module.asyncio, "sleep", sim.sleep)
    targets = tuple(TargetConfig(url=f"http://t{i}:8000") for i in range(n))
    config = Config(targets=targets, poll_interval=1.0, host_enabled=False, gpu_enabled=False)
    exp = Exporter(config, clock=clock, timer=clock, runtime_metrics=False, rng=random.Random(1))
    starts: dict[int, list[float]] = {i: [] for i in range(n)}
    for i, target in enumerate(exp.targets):

        async def poll_once(session: Any, i: int = i) -> float:
            starts[i].append(clock.t)
            return 0.0

        monkeypatch.setattr(target, "poll_once", poll_once)
    loops = [asyncio.ensure_future(exp.scheduler.target_loop(t, None, first=False)) for t in exp.targets]  # type: ignore[arg-type]
    await sim.run_until(until)
    for loop in loops:
        loop.cancel()
    return starts


async def test_a_fleet_of_100_polls_in_waves_each_target_once_an_interval(monkeypatch: pytest.MonkeyPatch) -> None:
    starts = await _starts_by_target(monkeypatch, 100, 10.0)
    waves = math.ceil(100 / scheduler_module.WAVE)
    moments = {round(t % 1.0, 6) for ts in starts.values() for t in ts}
    # One target at a time (each its own random phase) would start at ~100 moments of the interval.
    assert 1 < len(moments) <= waves, sorted(moments)
    for ts in starts.values():  # the waves change no target's interval
        assert len(ts) >= 9
        assert all(round(b - a, 6) == 1.0 for a, b in itertools.pairwise(ts)), ts


async def test_a_fleet_smaller_than_a_wave_is_polled_together(monkeypatch: pytest.MonkeyPatch) -> None:
    starts = await _starts_by_target(monkeypatch, 10, 5.0)
    assert len({round(t % 1.0, 6) for ts in starts.values() for t in ts}) == 1  # one moment of the interval
    assert all(len(ts) >= 4 for ts in starts.values())


async def test_the_targets_of_a_wave_share_one_timer(monkeypatch: pytest.MonkeyPatch) -> None:
    """A sleep of its own per target and poll put a timer in the loop's heap each: 100 targets over 10 intervals
    made ~1,000 sleeps. A wave's one timer makes one a wave and interval (and the first, random one)."""
    sim = _Simulated(_Clock())
    starts = await _starts_by_target(monkeypatch, 100, 10.0, sim)
    assert sum(map(len, starts.values())) >= 900  # every target still polled each interval
    waves = math.ceil(100 / scheduler_module.WAVE)
    assert sim.sleeps <= waves * 11, sim.sleeps


async def test_a_removed_target_leaves_its_wave_waiting(monkeypatch: pytest.MonkeyPatch) -> None:
    """Cancelling one waiter (a reload removed its target) must not cancel the wave's timer for the others."""
    sim = _Simulated(_Clock())
    monkeypatch.setattr(scheduler_module.asyncio, "sleep", sim.sleep)
    config = Config(targets=(TargetConfig(url="http://t0:8000"),), host_enabled=False, gpu_enabled=False)
    exp = Exporter(config, clock=sim.clock, timer=sim.clock, runtime_metrics=False, rng=random.Random(1))
    woken: list[int] = []

    async def wait(i: int) -> None:
        await exp.scheduler._until(5.0, 0.0)
        woken.append(i)

    waiters = [asyncio.ensure_future(wait(i)) for i in range(3)]
    await sim.run_until(1.0)
    waiters[1].cancel()
    await sim.run_until(10.0)
    assert woken == [0, 2] and sim.sleeps == 1

"""The poll loop's schedule on simulated time: a poll slower than the interval skips the slots it missed
and keeps the loop's phase, instead of polling back to back until it has caught up.

Why: the skip could be removed with every test green. Simulated time: the loop's sleeps and each poll move
a manual clock; nothing here waits for real time."""

from __future__ import annotations

import asyncio
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
    assert 0.0 <= phase < 1.0
    # Started on the next free slot of the original phase: every third one, never 2.5 s apart.
    assert [round(t - phase, 9) for t in starts[:6]] == [0.0, 3.0, 6.0, 9.0, 12.0, 15.0]

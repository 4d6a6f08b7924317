"""A reload applies everything it accepts to every target: a new poll interval is the interval of the
targets that were already running (not only of added ones), their history is resized for it, and the poll
loops run on the injected timer. Simulated time: the loop's sleeps advance a manual clock."""

from __future__ import annotations

import asyncio
import logging
import random
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from kvoffload_exporter.cli import build_parser
from kvoffload_exporter.commands.serve import ReloadStatus, config_from_args, reload
from kvoffload_exporter.config.settings import Config, TargetConfig
from kvoffload_exporter.server import scheduler as scheduler_module
from kvoffload_exporter.server.exporter import Exporter


class _Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


async def test_a_reload_from_0_1_s_to_1_s_polls_the_unchanged_target_once_a_second(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    clock = _Clock()
    real_sleep = asyncio.sleep

    async def sleep(seconds: float) -> None:  # simulated: the loop's sleep moves the clock
        clock.t += max(0.0, seconds)
        await real_sleep(0)

    monkeypatch.setattr(scheduler_module.asyncio, "sleep", sleep)
    tc = TargetConfig(url="http://a:8000")
    fast = Config(targets=(tc,), poll_interval=0.1, window=60.0, host_enabled=False, gpu_enabled=False)
    exp = Exporter(fast, clock=clock, timer=clock, runtime_metrics=False, rng=random.Random(0))
    target, at = exp.targets[0], []

    async def poll_once(session: Any) -> float:  # no upstream: only when the loop polls matters
        target.polls += 1
        at.append(clock.t)
        return 0.0

    monkeypatch.setattr(target, "poll_once", poll_once)
    loop = asyncio.ensure_future(exp.scheduler.target_loop(target, None))  # type: ignore[arg-type]
    while clock.t < 5.0:
        await real_sleep(0)
    before = [t for t in at if 4.0 <= t < 5.0]
    exp.reload(replace(fast, poll_interval=1.0))  # no session: the running loop is the one that must follow
    start = clock.t
    while clock.t < start + 20.0:
        await real_sleep(0)
    loop.cancel()
    after = [t for t in at if start + 5.0 <= t < start + 15.0]
    assert len(before) >= 9, before  # 10 polls a second before the reload
    assert 9 <= len(after) <= 11, after  # 1 a second after it, although the target was not changed


async def test_a_reload_resizes_history_and_restarts_the_loops_of_unchanged_targets() -> None:
    tc = TargetConfig(url="http://127.0.0.1:9")
    fast = Config(targets=(tc,), poll_interval=0.1, window=60.0, host_enabled=False, gpu_enabled=False)
    exp = Exporter(fast, runtime_metrics=False)
    slow = replace(fast, poll_interval=1.0)
    kept = exp.targets[0]
    exp.scheduler.session = object()  # type: ignore[assignment]
    exp.scheduler.loops[tc] = old_loop = asyncio.ensure_future(asyncio.Event().wait())
    exp.scheduler.start_target = lambda t, s, first=True: exp.scheduler.loops.__setitem__(
        t.cfg, asyncio.ensure_future(asyncio.sleep(0))
    )  # type: ignore[method-assign]
    exp.reload(slow)
    await asyncio.sleep(0)
    assert exp.targets[0] is kept and kept.config is slow
    assert kept.history.maxlen == slow.history_len < fast.history_len
    assert old_loop.cancelled() and exp.scheduler.loops[tc] is not old_loop


def test_a_field_that_cannot_change_at_runtime_is_refused_in_one_line(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    conf = tmp_path / "c.yaml"
    conf.write_text("poll_interval: 0.1\ntimeout: 0.5\ngpu: false\nhost: false\ntargets: [http://127.0.0.1:9]\n")
    args = build_parser().parse_args(["serve", "--config.file", str(conf)])
    exp = Exporter(config_from_args(args, {}), runtime_metrics=False)
    listen = exp.config.listen
    conf.write_text("poll_interval: 1\ngpu: true\nhost: false\nlisten: 127.0.0.1:1\ntargets: [http://127.0.0.1:9]\n")
    with caplog.at_level(logging.WARNING):
        reload(args, exp, ReloadStatus())
    assert exp.config.poll_interval == 1.0, "what can change is applied"
    assert not exp.config.gpu_enabled and exp.config.listen == listen
    lines = [r.getMessage() for r in caplog.records if "only on restart" in r.getMessage()]
    assert lines == ["configuration reload: listen, gpu.enabled change only on restart; kept as they were"]

"""Logs bounded per target and per source: a target whose failure text differs on every poll writes one
WARNING per failure kind per interval, its detail cut short, the rest counted; `/probe` of many failing
URLs shares one budget."""

from __future__ import annotations

import logging

import aiohttp
import pytest
from aiohttp.test_utils import TestClient, TestServer

from kvoffload_exporter.config.settings import Config, TargetConfig
from kvoffload_exporter.server.app import make_app
from kvoffload_exporter.server.logbudget import BOUNDS, LOG_INTERVAL, MAX_DETAIL, LogBudget
from kvoffload_exporter.server.targetpoller import TargetPoller
from kvoffload_exporter.sources.vllm_http import ScrapeError

CONFIG = Config(gpu_enabled=False, host_enabled=False, poll_interval=5.0, timeout=1.0)


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def _warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]


def test_a_failure_text_that_differs_every_poll_is_one_line_per_kind_per_interval(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG, logger="kvoffload")
    clock = Clock()
    poller = TargetPoller(TargetConfig(url="http://127.0.0.1:9", name="t"), CONFIG, timer=clock)
    before = BOUNDS.suppressed
    for i in range(720):  # an hour of 5 s polls, 30 KB of junk that differs every time
        clock.t += 5.0
        poller._failed(ScrapeError("parse", f"{i} " + "x" * 30_000), None, clock.t)
        if i % 2:
            poller._failed(ScrapeError("connect", f"reset {i}"), None, clock.t)
    lines = _warnings(caplog)
    per_kind = 3600 / LOG_INTERVAL
    assert len([x for x in lines if ": parse: " in x]) == per_kind
    assert len([x for x in lines if ": connect: " in x]) == per_kind
    assert all(len(x) < MAX_DETAIL + 200 for x in lines), max(map(len, lines))
    assert "held back" in lines[-1]
    assert BOUNDS.suppressed - before == 720 + 360 - 2 * per_kind
    assert poller.errors == {"parse": 720, "connect": 360}  # every failure still counted


def test_a_budget_lets_one_line_through_per_key_and_interval() -> None:
    clock = Clock()
    budget = LogBudget(interval=10.0, timer=clock)
    assert budget.allow("a") == (True, 0)
    assert budget.allow("a") == (False, 0) and budget.allow("b") == (True, 0)
    clock.t += 10.0
    assert budget.allow("a") == (True, 1)


async def test_probe_failures_from_any_number_of_urls_share_one_budget(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="kvoffload")
    cfg = Config(gpu_enabled=False, host_enabled=False, timeout=0.5, probe_allow_regex=r"http://127\.0\.0\.1:[0-9]+")
    async with TestClient(TestServer(make_app(cfg))) as client:
        for port in range(1, 41):  # 40 URLs where nothing listens: unauthenticated, every one fails
            r = await client.get("/probe", params={"target": f"http://127.0.0.1:{port}"})
            assert r.status == 200 and "kvoffload_up" in await r.text()
        metrics = await (await client.get("/metrics")).text()
    assert "kvoffload_exporter_log_lines_suppressed_total " in metrics
    assert "kvoffload_exporter_label_churn_total " in metrics
    assert len([x for x in _warnings(caplog) if "127.0.0.1:" in x]) == 1


async def test_an_unexpected_error_every_poll_logs_one_traceback_per_interval(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    from kvoffload_exporter.server import targetpoller

    caplog.set_level(logging.DEBUG, logger="kvoffload")
    clock = Clock()
    poller = TargetPoller(TargetConfig(url="http://127.0.0.1:9", name="t"), CONFIG, timer=clock)

    async def broken(*a: object, **k: object) -> str:
        raise RuntimeError("bug")

    monkeypatch.setattr(targetpoller, "fetch_metrics", broken)
    monkeypatch.setattr(targetpoller, "fetch_version", lambda *a, **k: _none())
    async with aiohttp.ClientSession() as session:
        for _ in range(20):
            clock.t += 5.0
            await poller.poll_once(session)
    assert len([r for r in caplog.records if r.exc_info]) == 1
    assert poller.errors == {"internal": 20}


async def _none() -> None:
    return None

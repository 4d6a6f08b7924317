"""`serve --canary.enabled` against hostile answers on a real loopback server: the failure is counted by its
closed reason, logged once, shown as `kvoffload_canary_up 0`, and the canary recovers once the server is
fixed; a loop that raises is restarted and counted; the API key reaches neither the log nor /metrics."""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from kvoffload_exporter.canary.config import from_mapping
from kvoffload_exporter.canary.cycle.engine import CanaryEngine
from kvoffload_exporter.canary.plugin import make_plugin
from kvoffload_exporter.config.settings import Config, TargetConfig
from kvoffload_exporter.server.app import make_app
from tests.support.hostile_canary import ECHO, KEY_ENCODINGS, hostile_vllm

KEY = "sk-serve-hostile-0123456789"
BOUND = 60.0


def _value(text: str, series: str) -> float:
    m = re.search(re.escape(series) + r" (\S+)", text)
    return float(m.group(1)) if m else 0.0


def _ok(text: str) -> float:
    return _value(text, 'kvoffload_canary_cycles_total{target="h",reason="ok"}') + _value(
        text, 'kvoffload_canary_cycles_total{target="h",reason="loaded_but_slower"}'
    )


async def _app(aiohttp_client: Any, tmp_path: Path, url: str) -> Any:
    (tmp_path / "key").write_text(KEY + "\n")
    settings = from_mapping(
        {
            "enabled": True,
            "strategy": "pressure",
            "allow_pressure": True,
            "settle": 0.01,
            "interval": 0.05,
            "backoff_initial": 0.01,
            "backoff_max": 0.05,
            "budget_tokens_per_hour": 100_000_000,
            "secret_file": str(tmp_path / "secret"),
            "api_key_file": str(tmp_path / "key"),
        }
    )
    cfg = Config(
        targets=(TargetConfig(url, name="h"),), poll_interval=0.5, window=5.0, host_enabled=False, gpu_enabled=False
    )
    return await aiohttp_client(make_app(cfg, plugins=(make_plugin(settings),)))


async def _until(client: Any, done: Callable[[str], bool]) -> str:
    """/metrics, polled until `done` holds (bounded: the test fails rather than hangs)."""
    async with asyncio.timeout(BOUND):
        while True:
            text: str = await (await client.get("/metrics")).text()
            if done(text):
                return text
            await asyncio.sleep(0.05)


@pytest.mark.parametrize(
    ("mode", "reason"), [("choices_object", "invalid"), ("deep", "too_deep"), ("nan", "non_finite")]
)
async def test_a_hostile_answer_is_counted_logged_once_and_recovered_from(  # type: ignore[no-untyped-def]
    aiohttp_client, tmp_path: Path, caplog: pytest.LogCaptureFixture, mode: str, reason: str
) -> None:
    caplog.set_level(logging.DEBUG, logger="kvoffload")
    series = f'kvoffload_canary_errors_total{{target="h",reason="{reason}"}}'
    async with hostile_vllm(api_key=KEY) as h:
        h.set("/v1/completions", mode)
        client = await _app(aiohttp_client, tmp_path, h.url)
        text = await _until(client, lambda t: _value(t, series) >= 3)
        assert 'kvoffload_canary_up{target="h"} 0.0' in text
        h.set("/v1/completions", None)  # the server is fixed
        text = await _until(client, lambda t: _ok(t) >= 1)
    assert 'kvoffload_canary_up{target="h"} 1.0' in text
    assert 'kvoffload_canary_restarts_total{target="h"} 0.0' in text  # handled per cycle, no crash
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING and f": {reason} " in r.getMessage()]
    assert len(warnings) == 1, [r.getMessage() for r in warnings]  # three failures or more, one warning
    assert any("recovered after" in r.getMessage() for r in caplog.records)
    assert not any(r.exc_info and r.levelno > logging.DEBUG for r in caplog.records)  # no traceback


async def test_an_echoed_key_reaches_neither_the_log_nor_metrics(  # type: ignore[no-untyped-def]
    aiohttp_client, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="kvoffload")
    async with hostile_vllm(api_key=KEY) as h:
        h.set("/v1/completions", ECHO)
        client = await _app(aiohttp_client, tmp_path, h.url)
        series = 'kvoffload_canary_errors_total{target="h",reason="http_4xx"}'
        text = await _until(client, lambda t: _value(t, series) >= 2)
    assert h.seen >= 2 and KEY not in text
    logged = "\n".join(r.getMessage() for r in caplog.records)
    assert "Authorization: Bearer <redacted>" in logged and KEY not in logged


@pytest.mark.parametrize("encoding", sorted(KEY_ENCODINGS))
async def test_a_key_echoed_in_any_encoding_reaches_neither_the_log_nor_metrics(  # type: ignore[no-untyped-def]
    aiohttp_client, tmp_path: Path, caplog: pytest.LogCaptureFixture, encoding: str
) -> None:
    caplog.set_level(logging.DEBUG, logger="kvoffload")
    async with hostile_vllm(api_key=KEY) as h:
        h.set("/v1/completions", f"echo_key:{encoding}")
        client = await _app(aiohttp_client, tmp_path, h.url)
        series = 'kvoffload_canary_errors_total{target="h",reason="http_4xx"}'
        text = await _until(client, lambda t: _value(t, series) >= 2)
    spelled = KEY_ENCODINGS[encoding](KEY)
    core = spelled[-24:-4] if encoding == "base64_header" else (KEY if encoding in ("json", "url") else spelled)
    logged = "\n".join(r.getMessage() for r in caplog.records)
    assert h.seen >= 2 and "http_4xx" in logged
    assert core not in text and core not in logged


async def test_a_loop_that_raises_is_restarted_and_counted(  # type: ignore[no-untyped-def]
    aiohttp_client, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    real: Callable[[CanaryEngine], Awaitable[Any]] = CanaryEngine.run_cycle
    calls = {"n": 0}

    async def crash_once(self: CanaryEngine) -> Any:
        calls["n"] += 1
        if calls["n"] == 1:
            raise RuntimeError("a bug outside any cycle")
        return await real(self)

    monkeypatch.setattr(CanaryEngine, "run_cycle", crash_once)
    async with hostile_vllm(api_key=KEY) as h:
        client = await _app(aiohttp_client, tmp_path, h.url)
        text = await _until(client, lambda t: _ok(t) >= 1)
    assert 'kvoffload_canary_restarts_total{target="h"} 1.0' in text
    assert 'kvoffload_canary_up{target="h"} 1.0' in text
    assert any("its loop failed (RuntimeError); restarting" in r.getMessage() for r in caplog.records)

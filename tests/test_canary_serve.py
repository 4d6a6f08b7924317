"""`serve --canary.enabled`: the plugin runs an engine per target and its samples appear on /metrics."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

from kvoffload_exporter.canary.config import CanarySettings, from_mapping
from kvoffload_exporter.canary.plugin import make_plugin
from kvoffload_exporter.config.settings import Config, TargetConfig
from kvoffload_exporter.server.app import make_app
from kvoffload_exporter.sim.server import start
from kvoffload_exporter.sim.simulator import SimOptions, Simulator


def _value(text: str, series: str) -> float | None:
    m = re.search(re.escape(series) + r" (\S+)", text)
    return float(m.group(1)) if m else None


def _fast_pressure(tmp_path: Path) -> CanarySettings:
    """A canary that displaces with fillers and cycles every 0.2 s, its secret in the test's folder."""
    return from_mapping(
        {
            "enabled": True,
            "strategy": "pressure",
            "allow_pressure": True,
            "settle": 0.01,
            "interval": 0.2,
            "budget_tokens_per_hour": 10_000_000,
            "secret_file": str(tmp_path / "secret"),
        }
    )


async def test_canary_samples_on_metrics(aiohttp_client, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    runner, url = await start(Simulator(SimOptions(time_scale=0.2, seed=4)))
    try:
        settings = _fast_pressure(tmp_path)
        cfg = Config(
            targets=(TargetConfig(url, name="sim"),),
            poll_interval=0.5,
            window=5.0,
            host_enabled=False,
            gpu_enabled=False,
        )
        client = await aiohttp_client(make_app(cfg, plugins=(make_plugin(settings),)))
        text = ""
        for _ in range(200):  # bounded wait for two cycles; nothing here asserts on time
            text = await (await client.get("/metrics")).text()
            ok = _value(text, 'kvoffload_canary_cycles_total{target="sim",reason="loaded_but_slower"}') or 0.0
            ok += _value(text, 'kvoffload_canary_cycles_total{target="sim",reason="ok"}') or 0.0
            if ok >= 2:
                break
            await asyncio.sleep(0.1)
        assert ok >= 2, text
    finally:
        await runner.cleanup()
    assert _value(text, 'kvoffload_canary_probes_total{target="sim",result="offload_hit"}') >= 2
    assert _value(text, 'kvoffload_canary_probes_total{target="sim",result="error"}') == 0
    assert _value(text, 'kvoffload_canary_tokens_spent_total{target="sim"}') > 0
    remaining = _value(text, 'kvoffload_canary_budget_remaining_tokens{target="sim"}')
    assert remaining is not None and remaining < 10_000_000
    assert 'kvoffload_canary_ttft_seconds{target="sim",path="offload_hit",quantile="0.5"}' in text
    assert 'kvoffload_canary_verdict{target="sim",verdict="inconclusive"} 1.0' in text
    assert 'kvoffload_exporter_collector_success{collector="canary"} 1.0' in text
    assert _value(text, 'kvoffload_canary_last_success_timestamp_seconds{target="sim"}') is not None


async def test_unreachable_target_counts_error_cycles(aiohttp_client, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    settings = from_mapping(
        {
            "enabled": True,
            "strategy": "pressure",
            "allow_pressure": True,
            "interval": 0.05,
            "budget_tokens_per_hour": 1_000_000,
            "secret_file": str(tmp_path / "secret"),
        }
    )
    cfg = Config(
        targets=(TargetConfig("http://127.0.0.1:9", name="gone"),),
        poll_interval=0.5,
        window=5.0,
        host_enabled=False,
        gpu_enabled=False,
    )
    client = await aiohttp_client(make_app(cfg, plugins=(make_plugin(settings),)))
    text = ""
    for _ in range(200):  # bounded wait for the first failed preparation
        text = await (await client.get("/metrics")).text()
        if (_value(text, 'kvoffload_canary_cycles_total{target="gone",reason="error"}') or 0) >= 1:
            break
        await asyncio.sleep(0.05)
    assert (_value(text, 'kvoffload_canary_cycles_total{target="gone",reason="error"}') or 0) >= 1, text
    assert 'kvoffload_exporter_collector_success{collector="canary"} 0.0' in text
    assert _value(text, 'kvoffload_canary_last_success_timestamp_seconds{target="gone"}') is None


async def test_a_corrupting_tier_counts_output_mismatches_within_two_cycles(aiohttp_client, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    runner, url = await start(Simulator(SimOptions(time_scale=0.2, seed=4, faults=("corrupt-loads=1",))))
    settings = _fast_pressure(tmp_path)
    cfg = Config(
        targets=(TargetConfig(url, name="sim"),), poll_interval=0.5, window=5.0, host_enabled=False, gpu_enabled=False
    )
    bad = 'kvoffload_canary_output_mismatches_total{target="sim",pair="offload_vs_gpu"}'
    try:
        client = await aiohttp_client(make_app(cfg, plugins=(make_plugin(settings),)))
        text, cycles, mismatches = "", 0.0, 0.0
        for _ in range(200):  # bounded wait; nothing here asserts on time
            text = await (await client.get("/metrics")).text()
            cycles = sum(
                _value(text, f'kvoffload_canary_cycles_total{{target="sim",reason="{r}"}}') or 0.0
                for r in ("ok", "loaded_but_slower")
            )
            mismatches = _value(text, bad) or 0.0
            if mismatches > 0 or cycles >= 2:
                break
            await asyncio.sleep(0.1)
    finally:
        await runner.cleanup()
    assert mismatches > 0 and cycles <= 2, text
    assert _value(text, 'kvoffload_canary_output_compared_total{target="sim",pair="offload_vs_gpu"}') >= 1
    assert _value(text, 'kvoffload_canary_output_sensitive{target="sim"}') == 1.0
    assert 'kvoffload_canary_verdict{target="sim",verdict="output_mismatch"} 1.0' in text

"""The typed plugin seam: the canary plugin uses only `PluginHost`, and its exposition is a collector."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from pathlib import Path

import aiohttp

from kvoffload_exporter.canary.config import CanarySettings, from_mapping
from kvoffload_exporter.canary.cycle.engine import CanaryState
from kvoffload_exporter.canary.expose import CanaryCollector, render
from kvoffload_exporter.canary.plugin import make_plugin
from kvoffload_exporter.config.settings import Config, TargetConfig
from kvoffload_exporter.derive.reasons import CanaryFacts
from kvoffload_exporter.enums import CollectorName
from kvoffload_exporter.expose.collector import Collector, collect
from kvoffload_exporter.expose.render import Exposition
from kvoffload_exporter.server.exporter import Exporter
from kvoffload_exporter.server.pluginhost import ExporterHost
from kvoffload_exporter.server.plugins import PluginHost


class FakeHost:
    """A PluginHost with no exporter behind it: records what the plugin asked for."""

    def __init__(self, config: Config) -> None:
        self._config = config
        self.collectors: list[Collector] = []
        self.health: list[tuple[CollectorName, bool, float]] = []
        self.tasks: list[Awaitable[None]] = []
        self.facts: dict[str, CanaryFacts] = {}

    @property
    def config(self) -> Config:
        return self._config

    def add_collector(self, collector: Collector) -> None:
        self.collectors.append(collector)

    def report_collector(self, name: CollectorName, ok: bool, duration: float) -> None:
        self.health.append((name, ok, duration))

    def report_facts(self, target: str, facts: CanaryFacts) -> None:
        self.facts[target] = facts

    def spawn(self, task: Awaitable[None]) -> None:
        self.tasks.append(task)


def _config() -> Config:
    targets = (TargetConfig("http://127.0.0.1:9", name="a"), TargetConfig("http://127.0.0.1:10", name="b"))
    return Config(targets=targets, host_enabled=False, gpu_enabled=False)


async def test_canary_plugin_works_through_the_host_protocol_alone(tmp_path: Path) -> None:
    settings = from_mapping({"enabled": True, "secret_file": str(tmp_path / "secret")})
    host = FakeHost(_config())
    checked: PluginHost = host  # the fake satisfies the protocol (mypy checks this line)
    async with aiohttp.ClientSession() as session:  # not used before a task runs
        make_plugin(settings)(checked, session)
    assert host.health == [(CollectorName.CANARY, True, 0.0)]
    assert len(host.tasks) == 2 and len(host.collectors) == 1  # one engine loop per target, one collector
    for task in host.tasks:
        task.close()  # type: ignore[attr-defined]  # coroutines that never ran
    x = Exposition()
    host.collectors[0].collect(x)
    text = x.text()
    assert 'kvoffload_canary_verdict{target="a",verdict="inconclusive"} 1.0' in text
    assert 'kvoffload_canary_verdict{target="b",verdict="inconclusive"} 1.0' in text


class _Engine:
    def __init__(self, state: CanaryState) -> None:
        self.state = state


def test_canary_collector_reads_the_live_state_on_every_render() -> None:
    engine = _Engine(CanaryState("t", CanarySettings()))
    collector = CanaryCollector([engine])
    first = collect([], "1m", extras=[collector])
    engine.state = CanaryState("t", CanarySettings())
    engine.state.probes["offload_hit"] += 3
    second = collect([], "1m", extras=[collector])
    assert 'kvoffload_canary_probes_total{target="t",result="offload_hit"} 0.0' in first
    assert 'kvoffload_canary_probes_total{target="t",result="offload_hit"} 3.0' in second
    x = Exposition()
    render(x, [engine.state])
    assert x.text() in second  # the collector adds exactly what render() writes


async def test_exporter_implements_the_host_protocol() -> None:
    exp = Exporter(_config())
    host: PluginHost = ExporterHost(exp)
    engine = _Engine(CanaryState("a", CanarySettings()))
    host.add_collector(CanaryCollector([engine]))
    host.report_collector(CollectorName.CANARY, False, 1.5)
    body = exp.body.decode()
    assert 'kvoffload_exporter_collector_success{collector="canary"} 0.0' in body
    assert 'kvoffload_exporter_collector_duration_seconds{collector="canary"} 1.5' in body
    assert 'kvoffload_canary_verdict{target="a",verdict="inconclusive"} 1.0' in body
    ran = asyncio.Event()

    async def task() -> None:
        ran.set()
        await asyncio.sleep(3600)

    host.spawn(task())
    await asyncio.wait_for(ran.wait(), 5)
    await exp.stop()  # cancels what was spawned

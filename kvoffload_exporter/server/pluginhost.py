"""The running exporter as a plugin sees it: the `PluginHost` of kvoffload_exporter.server.plugins over an
`Exporter`. All a plugin may do goes through here, so the exporter's internals can change without it."""

from __future__ import annotations

from collections.abc import Awaitable
from dataclasses import replace

from kvoffload_exporter.config.settings import Config
from kvoffload_exporter.derive.reasons import CanaryFacts
from kvoffload_exporter.enums import CollectorName
from kvoffload_exporter.expose.collector import Collector
from kvoffload_exporter.server.exporter import Exporter


class ExporterHost:
    """Implements `PluginHost` for one exporter."""

    def __init__(self, exporter: Exporter) -> None:
        self._exp = exporter

    @property
    def config(self) -> Config:
        return self._exp.config

    def add_collector(self, collector: Collector) -> None:
        self._exp.add_collector(collector)

    def report_collector(self, name: CollectorName, ok: bool, duration: float) -> None:
        self._exp.report_collector(name, ok, duration)

    def spawn(self, task: Awaitable[None]) -> None:
        self._exp.scheduler.add_task(task)

    def report_facts(self, target: str, facts: CanaryFacts) -> None:
        for t in self._exp.targets:
            if t.cfg.label == target:
                t.canary = facts
                if t.view.up:  # re-explain now, not at the next poll
                    t._set_view(replace(t.view, canary=facts))
        self._exp.render()

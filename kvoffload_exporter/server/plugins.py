"""The typed plugin seam: what a plugin (the canary today) may ask of the running exporter.

A plugin is called once at start-up with a `PluginHost` and the shared HTTP session. It adds its
series as a `Collector` (rendered with the others on every re-render), reports its own collector
health under a closed `CollectorName`, and spawns its loops as exporter tasks, so it needs nothing of
the exporter's internals. `pluginhost.ExporterHost` implements the protocol over the exporter; tests can pass a fake.

Settings: a plugin's own mapping of the config file (`canary:`) is a `Section` that the plugin's settings
module registers with `register_section` when it is imported; the core then parses and checks it with
the rest of the file and hands it back as `Config.<key>`, without ever importing the plugin.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Protocol, TypeAlias

import aiohttp

from kvoffload_exporter.config.sections import Section, register_section
from kvoffload_exporter.config.settings import Config
from kvoffload_exporter.derive.reasons import CanaryFacts
from kvoffload_exporter.enums import CollectorName
from kvoffload_exporter.expose.collector import Collector

Session: TypeAlias = aiohttp.ClientSession
"""The shared aiohttp client session handed to plugins (the canary's completions); the target polls keep
their own connections (`sources.pollclient.PollClient`)."""


class PluginHost(Protocol):
    """The exporter as a plugin sees it."""

    @property
    def config(self) -> Config:
        """The exporter's configuration (targets, window); read-only for plugins."""
        ...

    def add_collector(self, collector: Collector) -> None:
        """Render `collector`'s samples on every exposition from now on, after the built-in ones."""
        ...

    def report_collector(self, name: CollectorName, ok: bool, duration: float) -> None:
        """Record a collector run (kvoffload_exporter_collector_success / _duration_seconds) and re-render."""
        ...

    def spawn(self, task: Awaitable[None]) -> None:
        """Run `task` until the exporter stops (cancelled on shutdown)."""
        ...

    def report_facts(self, target: str, facts: CanaryFacts) -> None:
        """What the plugin learnt about a target (by label) that refines the state reasons; re-renders."""
        ...


Plugin = Callable[[PluginHost, Session], None]

__all__ = ["CanaryFacts", "Collector", "Plugin", "PluginHost", "Section", "Session", "register_section"]

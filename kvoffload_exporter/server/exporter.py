"""The running exporter's state: its targets, the host and GPU readings, and a reload that applies to all.

It composes the two halves that act on that state: the scheduler (kvoffload_exporter.server.scheduler)
decides when each target, the host and the GPU are read; the exposition cache
(kvoffload_exporter.server.expocache) merges and gzips what they read once per generation. Plugins reach
it only through kvoffload_exporter.server.pluginhost.
"""

from __future__ import annotations

import random
import time
from collections.abc import Awaitable, Callable, Mapping

import aiohttp

from kvoffload_exporter.config.settings import Config
from kvoffload_exporter.expose.collector import Collector, shared_fragment
from kvoffload_exporter.expose.render import Exposition
from kvoffload_exporter.expose.selfmon import SelfStats
from kvoffload_exporter.ingest.snapshot import GpuMemory, HostMemory
from kvoffload_exporter.server.expocache import ExpositionCache
from kvoffload_exporter.server.scheduler import Scheduler
from kvoffload_exporter.server.targetpoller import TargetPoller
from kvoffload_exporter.sources.vllm_http import PollClient


class Exporter:
    """Owns the pollers and readings; `scheduler` reads them on time, `cache` serves them."""

    def __init__(
        self,
        config: Config,
        clock: Callable[[], float] = time.time,
        timer: Callable[[], float] = time.monotonic,
        runtime_metrics: bool = True,
        rng: random.Random | None = None,
    ):
        self.config = config
        self.clock = clock
        self.timer = timer
        self.targets = [TargetPoller(t, config, clock, timer) for t in config.targets]
        self.probed: dict[str, TargetPoller] = {}  # by normalised URL, filled by kvoffload_exporter.server.probe
        self.host: HostMemory | None = None
        self.gpu: tuple[GpuMemory, ...] | None = None
        self.collectors: dict[str, tuple[bool, float]] = {}
        self.extras: list[Collector] = []  # plugins' and the guards' collectors, rendered after the built-in ones
        self.stats = SelfStats()
        self.ready = not self.targets  # True once every configured target was polled once
        self.reload_hooks: list[Callable[[], None]] = []  # run after each reload (the /probe allow-list)
        self.cache = ExpositionCache(self._fragments, self.stats, timer, config.poll_interval, runtime_metrics)
        self.scheduler = Scheduler(self, timer, rng)

    def render(self) -> None:
        """Something changed: a later scrape merges again (the name is kept for callers that used it)."""
        self.cache.changed()

    def report_collector(self, name: str, ok: bool, seconds: float) -> None:
        """A collector's last run: whether it succeeded and how long it took (kvoffload_exporter_collector_*)."""
        self.collectors[name] = (ok, seconds)
        self.render()

    def host_read(self, host: HostMemory | None, ok: bool, seconds: float) -> None:
        self.host = host
        self.report_collector("host", ok, seconds)

    def gpu_read(self, gpu: tuple[GpuMemory, ...] | None, ok: bool, seconds: float) -> None:
        self.gpu = gpu
        self.report_collector("gpu", ok, seconds)

    def all_polled(self) -> None:
        self.ready = True

    def add_collector(self, collector: Collector) -> None:
        """Render `collector`'s samples on every exposition from now on, after the built-in ones."""
        self.extras.append(collector)
        self.render()

    @property
    def body(self) -> bytes:
        """The text 0.0.4 exposition of this generation."""
        return self.cache.exposition()

    def exposition(self, openmetrics: bool = False) -> bytes:
        return self.cache.exposition(openmetrics)

    async def gzip_exposition(self, openmetrics: bool = False) -> bytes:
        return await self.cache.gzip_exposition(openmetrics)

    def _fragments(self) -> list[Mapping[str, str]]:
        """The shared fragment (health, host, GPU, plugins), then one per configured target."""
        vllm_ok = all(t.view.up or t.view.pending for t in self.targets) if self.targets else True
        durs = [t.view.duration or 0.0 for t in self.targets]
        self.collectors["vllm"] = (vllm_ok, max(durs, default=0.0))
        x = Exposition()
        # Probed targets count too: a probe-only replica (no `targets:`) reports the shard it serves.
        up = sum(1 for t in (*self.targets, *self.probed.values()) if t.view.up)
        self.stats.render(x, len(self.targets), up, len(self.probed))
        shared = {**shared_fragment(self.host, self.gpu, self.collectors, self.extras), **x.fragment()}
        return [shared, *(t.fragment for t in self.targets)]

    @property
    def session(self) -> aiohttp.ClientSession | None:
        """The shared HTTP session, once started."""
        return self.scheduler.session

    @property
    def poll_client(self) -> PollClient | None:
        """The polls' keep-alive client, once started (closed by `stop`)."""
        return self.scheduler.client

    def start(self, session: aiohttp.ClientSession) -> None:
        self.scheduler.start(session)

    def add_task(self, coro: Awaitable[None]) -> None:
        self.scheduler.add_task(coro)

    async def stop(self) -> None:
        await self.scheduler.stop()

    def reload(self, config: Config) -> None:
        """New configuration (SIGHUP), applied to every target: unchanged targets keep their poller and
        history (resized for the new window and interval) and poll at the new interval from now on (their
        loop restarts on a new phase, without an extra poll); timeouts, caps and the poll slots apply from
        the next poll; added targets start, removed ones stop. Probed targets take it too, and the
        `reload_hooks` rebuild what was derived from the old configuration (the /probe allow-list)."""
        old = {t.cfg: t for t in self.targets}
        kept = set(old) & set(config.targets)
        restart = config.poll_interval != self.config.poll_interval
        self.scheduler.resize(self.config, config)
        self.cache.retime(config.poll_interval)
        self.config = config
        self.targets = [
            old.pop(tc) if tc in kept else TargetPoller(tc, config, self.clock, self.timer) for tc in config.targets
        ]
        for t in [*(t for t in self.targets if t.cfg in kept), *self.probed.values()]:
            t.reconfigure(config)
        self.scheduler.reschedule(kept, restart, old)  # what is left in `old` was removed
        for hook in self.reload_hooks:
            hook()
        self.render()

"""Polls every target on its own schedule, keeps bounded history and serves the exposition from memory.

`/metrics` never triggers upstream I/O. Each target keeps its own rendered fragment, rebuilt only
when that target polls; a scrape merges the fragments once per generation (any change bumps it) and
the merged and gzipped bytes are cached for that generation, so the work per poll stays flat from
one target to a thousand. Poll starts are spread over the interval, the number of polls in flight
is bounded, and parsing runs in a worker thread so the event loop keeps answering while it runs.
"""

from __future__ import annotations

import asyncio
import gzip
import logging
import os
import random
import time
import zlib
from collections import deque
from collections.abc import Awaitable, Callable
from contextlib import suppress
from dataclasses import replace
from typing import TYPE_CHECKING

import aiohttp
from prometheus_client import CollectorRegistry, GCCollector, PlatformCollector, ProcessCollector

from kvoffload_exporter.config.settings import Config, TargetConfig
from kvoffload_exporter.derive.reasons import CanaryFacts
from kvoffload_exporter.enums import CollectorName
from kvoffload_exporter.expose import gzipparts
from kvoffload_exporter.expose.collector import Collector, shared_fragment
from kvoffload_exporter.expose.render import Exposition, merge
from kvoffload_exporter.expose.selfmon import SelfStats
from kvoffload_exporter.ingest.snapshot import GpuMemory, HostMemory
from kvoffload_exporter.server.targetpoller import TargetPoller
from kvoffload_exporter.sources import host as host_source

if TYPE_CHECKING:
    from kvoffload_exporter.sources.gpu import Nvml

log = logging.getLogger("kvoffload.poller")


class Exporter:
    """Owns the pollers, host/GPU reads and the exposition cache."""

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
        self.extras: list[Collector] = []
        self.stats = SelfStats()
        self.generation = 0  # bumped by _publish when something changed
        self._dirty = True
        self._merged_at: float | None = None
        self._min_merge = min(1.0, config.poll_interval / 10)
        self.ready = not self.targets  # True once every configured target was polled once
        self.session: aiohttp.ClientSession | None = None
        self._runtime = _runtime_registry() if runtime_metrics else None
        self._rng = rng or random.Random()  # unseeded: replicas must not start in lockstep
        self._cache: dict[tuple[int, bool, bool], bytes] = {}
        self._gzip_lock = asyncio.Lock()
        self._gzipped: dict[bool, tuple[float, bytes]] = {}  # per format: (its generation's publish time, body)
        self._slots = asyncio.Semaphore(config.max_concurrent_polls)  # bounds polls in flight
        self._tasks: list[asyncio.Task[None]] = []
        self._loops: dict[TargetConfig, asyncio.Task[None]] = {}  # per configured target, for reload
        self._nvml: Nvml | None = None  # once started (imported lazily: pynvml only where --collector.gpu)
        self._smaps = host_source.SmapsCache()
        self.reload_hooks: list[Callable[[], None]] = []  # run after each reload (the /probe allow-list)

    def render(self) -> None:
        """Something changed: a later scrape merges again (the name is kept for plugins that call it)."""
        self._dirty = True

    def _publish(self) -> None:
        """Pending changes become a new generation, at most once per `_min_merge` seconds: at 1000
        targets a poll lands every few milliseconds, and merging (and gzipping) megabytes for each
        scrape would cost more than the polls themselves."""
        now = self.timer()
        if self._dirty and (self._merged_at is None or now - self._merged_at >= self._min_merge):
            self.generation += 1
            self._dirty = False
            self._merged_at = now

    @property
    def body(self) -> bytes:
        """The text 0.0.4 exposition of this generation."""
        return self.exposition()

    def exposition(self, openmetrics: bool = False) -> bytes:
        """The merged exposition of this generation; merged at most once per generation and format."""
        self._publish()
        key = (self.generation, openmetrics, False)
        cached = self._cache.get(key)
        if cached is None:
            started = self.timer()
            frags = [self._shared_fragment(), *(t.fragment for t in self.targets)]
            cached = merge(frags, openmetrics, self._runtime_text(openmetrics)).encode()
            self.stats.render_seconds = self.timer() - started
            self._cache = {k: v for k, v in self._cache.items() if k[0] == self.generation}
            self._cache[key] = cached
        return cached

    async def gzip_exposition(self, openmetrics: bool = False) -> bytes:
        """The gzipped body of this generation, compressed once (off the loop) however many ask.

        While one scrape compresses a newer generation, another is given the last compressed body if
        that one's generation was published under `2 * _min_merge` ago: no older than a scrape just
        before the new generation could have got, and it does not wait. At 1,000 targets the merge
        and gzip of 9.4 MB take ~50-130 ms on 2 busy cores; ten scrapers queued behind each one."""
        self._publish()
        key = (self.generation, openmetrics, True)
        last = self._gzipped.get(openmetrics)
        if key not in self._cache and self._gzip_lock.locked() and last is not None:
            published, body = last
            if self.timer() - published < 2 * self._min_merge:
                return body
        async with self._gzip_lock:
            cached = self._cache.get(key)
            if cached is None:
                published = self._merged_at or 0.0
                cached = await _gzip(self.exposition(openmetrics))
                if key[0] == self.generation:  # else it is already stale: serve it, do not keep it
                    self._cache[key] = cached
                    self._gzipped[openmetrics] = (published, cached)
        return cached

    def _shared_fragment(self) -> dict[str, str]:
        vllm_ok = all(t.view.up or t.view.pending for t in self.targets) if self.targets else True
        durs = [t.view.duration or 0.0 for t in self.targets]
        self.collectors["vllm"] = (vllm_ok, max(durs, default=0.0))
        x = Exposition()
        up = sum(1 for t in self.targets if t.view.up)
        self.stats.render(x, len(self.targets), up, len(self.probed))
        return {**shared_fragment(self.host, self.gpu, self.collectors, self.extras), **x.fragment()}

    def _runtime_text(self, openmetrics: bool) -> str:
        if self._runtime is None:
            return ""
        if openmetrics:
            from prometheus_client.openmetrics.exposition import generate_latest as om_latest

            text: str = om_latest(self._runtime).decode()  # type: ignore[no-untyped-call]  # unannotated upstream
            return text.removesuffix("# EOF\n")
        from prometheus_client import generate_latest

        plain: str = generate_latest(self._runtime).decode()
        return plain

    async def poll(self, poller: TargetPoller, session: aiohttp.ClientSession) -> None:
        """One poll of any target (configured or probed) through the bounded slots."""
        async with self._slots:
            self.stats.poll_duration.observe(await poller.poll_once(session))
        self.render()

    async def _target_loop(self, poller: TargetPoller, session: aiohttp.ClientSession, first: bool = True) -> None:
        """Poll `poller` every `poll_interval` (read each round, so a reload applies) on the injected timer."""
        # First poll at once (through the slots, so a big fleet starts in batches): `up` must not read 0
        # before a target was ever polled. Then a random phase spreads the fleet over the interval.
        if first:
            await self.poll(poller, session)
            self._check_ready()
        await asyncio.sleep(self._rng.uniform(0.0, self.config.poll_interval))
        due = self.timer()
        while True:
            async with self._slots:
                self.stats.poll_lag.observe(max(0.0, self.timer() - due))
                self.stats.poll_duration.observe(await poller.poll_once(session))
            self.render()
            interval = self.config.poll_interval
            due += interval
            now = self.timer()
            if now > due:  # fell behind (slow target or saturated): skip the missed slots, keep the phase
                due += interval * int((now - due) / interval + 1)
            await asyncio.sleep(due - now)

    def _check_ready(self) -> None:
        if not self.ready and all(t.polls for t in self.targets):
            self.ready = True

    def mark_stale(self) -> None:
        """Every target (configured or probed) whose last poll is too old is served as down, now."""
        if any([t.mark_stale() for t in (*self.targets, *self.probed.values())]):
            self.render()

    async def _stale_loop(self) -> None:
        """Staleness is checked on the clock, not at the next poll: a loop that stopped never polls again."""
        while True:
            await asyncio.sleep(min(1.0, self.config.poll_interval))
            self.mark_stale()

    async def _loop_lag(self) -> None:
        """How late the event loop wakes a sleeper: what a scrape would wait at worst."""
        while True:
            started = self.timer()
            await asyncio.sleep(0.5)
            self.stats.loop_lag.append(max(0.0, self.timer() - started - 0.5))

    def _read_host(self) -> HostMemory:
        pids = [(t.cfg.label, host_source.pids_for(t.cfg.pid, t.cfg.pidfile, t.cfg.local_port)) for t in self.targets]
        tiers = {t.cfg.label: b for t in self.targets if (b := t.view.total_tier_bytes) is not None}
        return host_source.read_host(
            self.config.proc_root, self.config.cgroup_root, pids, self.config.cgroup, tiers, self._smaps
        )

    async def _host_loop(self) -> None:
        while True:
            started = self.timer()
            try:
                self.host = await asyncio.to_thread(self._read_host)
                ok = True
            except Exception as e:  # a broken /proc or psutil must not stop the vLLM collector
                log.warning("host collector failed: %s", e)
                self.host, ok = None, False
            self.collectors["host"] = (ok, self.timer() - started)
            self.render()
            await asyncio.sleep(self.config.poll_interval)

    async def _gpu_loop(self) -> None:
        from kvoffload_exporter.sources.gpu import GpuUnavailable, Nvml

        nvml = Nvml()
        try:
            await asyncio.to_thread(nvml.start)
        except GpuUnavailable as e:
            log.warning("GPU collector disabled: %s", e)  # reported once; the rest keeps working
            self.collectors["gpu"] = (False, 0.0)
            self.render()
            return
        self._nvml = nvml
        while True:
            started = self.timer()
            try:
                self.gpu = await asyncio.to_thread(nvml.read)
                ok = True
            except GpuUnavailable as e:
                log.warning("GPU read failed: %s", e)
                self.gpu, ok = None, False
            self.collectors["gpu"] = (ok, self.timer() - started)
            self.render()
            await asyncio.sleep(self.config.poll_interval)

    def start(self, session: aiohttp.ClientSession) -> None:
        self.session = session
        for t in self.targets:
            self._start_target(t, session)
        self._tasks.append(asyncio.create_task(self._loop_lag()))
        self._tasks.append(asyncio.create_task(self._stale_loop()))
        if self.config.host_enabled:
            self._tasks.append(asyncio.create_task(self._host_loop()))
        if self.config.gpu_enabled:
            self._tasks.append(asyncio.create_task(self._gpu_loop()))

    def _start_target(self, poller: TargetPoller, session: aiohttp.ClientSession, first: bool = True) -> None:
        self._loops[poller.cfg] = task = asyncio.create_task(self._target_loop(poller, session, first))
        self._tasks.append(task)

    def reload(self, config: Config) -> None:
        """New configuration (SIGHUP), applied to every target: unchanged targets keep their poller and
        history (resized for the new window and interval) and poll at the new interval from now on (their
        loop restarts on a new phase, without an extra poll); timeouts, caps and the poll slots apply from
        the next poll; added targets start, removed ones stop. Probed targets take it too, and the
        `reload_hooks` rebuild what was derived from the old configuration (the /probe allow-list)."""
        old = {t.cfg: t for t in self.targets}
        kept = set(old) & set(config.targets)
        restart = config.poll_interval != self.config.poll_interval
        if config.max_concurrent_polls != self.config.max_concurrent_polls:
            self._slots = asyncio.Semaphore(config.max_concurrent_polls)  # polls in flight keep the old one
        self._min_merge = min(1.0, config.poll_interval / 10)
        self.config = config
        self.targets = [
            old.pop(tc) if tc in kept else TargetPoller(tc, config, self.clock, self.timer) for tc in config.targets
        ]
        for t in [*(t for t in self.targets if t.cfg in kept), *self.probed.values()]:
            t.config, t.history = config, deque(t.history, maxlen=config.history_len)
        for t in self.targets:
            if self.session is None:
                continue
            if t.cfg not in kept:
                self._start_target(t, self.session)
            elif restart and (task := self._loops.get(t.cfg)) is not None:
                task.cancel()
                self._start_target(t, self.session, first=False)
        for tc in old:  # removed
            if task := self._loops.pop(tc, None):
                task.cancel()
        for hook in self.reload_hooks:
            hook()
        self.render()

    def add_task(self, coro: Awaitable[None]) -> None:
        self._tasks.append(asyncio.ensure_future(coro))

    # --- plugins.PluginHost: all a plugin may do (config is the attribute above) ---

    def add_collector(self, collector: Collector) -> None:
        self.extras.append(collector)
        self.render()

    def report_collector(self, name: CollectorName, ok: bool, duration: float) -> None:
        self.collectors[name] = (ok, duration)
        self.render()

    def spawn(self, task: Awaitable[None]) -> None:
        self.add_task(task)

    def report_facts(self, target: str, facts: CanaryFacts) -> None:
        for t in self.targets:
            if t.cfg.label == target:
                t.canary = facts
                if t.view.up:  # re-explain now, not at the next poll
                    t._set_view(replace(t.view, canary=facts))
        self.render()

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with suppress(asyncio.CancelledError, Exception):
                await task
        self._tasks.clear()
        if self._nvml is not None:
            self._nvml.stop()


_PARTS = max(1, min(4, os.cpu_count() or 1))


async def _gzip(body: bytes) -> bytes:
    """Off the loop. Above 1 MiB: level 1 (a third of level 6's time, still ~18x smaller), in parts
    compressed at once on up to 4 cores (kvoffload_exporter.expose.gzipparts): 37 -> 26 ms on 2 cores at 9.4 MB."""
    if len(body) < 1 << 20:
        return await asyncio.to_thread(gzip.compress, body, 6)
    parts = gzipparts.split(body, _PARTS)
    last = len(parts) - 1
    crc = asyncio.ensure_future(asyncio.to_thread(zlib.crc32, body))
    deflated = await asyncio.gather(
        *(asyncio.to_thread(gzipparts.deflate, part, 1, i == last) for i, part in enumerate(parts))
    )
    return gzipparts.wrap(deflated, await crc, len(body))


def _runtime_registry() -> CollectorRegistry:
    """prometheus_client's own process_*, python_info and python_gc_* collectors, in a private registry."""
    registry = CollectorRegistry(auto_describe=False)
    ProcessCollector(registry=registry)
    PlatformCollector(registry=registry)
    GCCollector(registry=registry)
    return registry

"""When things are read: one poll loop per target, the host and GPU loops, staleness and loop-lag checks.

Polls start in waves (WAVE): the fleet is spread over the interval in groups, not one target at a time;
the number of polls in flight is bounded by the poll slots, and a large body is parsed in a worker thread
(kvoffload_exporter.server.targetpoller) so the event loop keeps answering scrapes while it runs. Every
loop sleeps on the injected timer's schedule and tells the fleet that something changed; what the fleet
serves is not its concern.
"""

from __future__ import annotations

import asyncio
import logging
import math
import random
from collections.abc import Awaitable, Callable, Iterable, Mapping
from contextlib import suppress
from typing import TYPE_CHECKING, Protocol

import aiohttp

from kvoffload_exporter.config.settings import Config, TargetConfig
from kvoffload_exporter.expose.selfmon import SelfStats
from kvoffload_exporter.ingest.snapshot import GpuMemory, HostMemory
from kvoffload_exporter.server.targetpoller import TargetPoller
from kvoffload_exporter.sources.vllm_http import Client, PollClient

if TYPE_CHECKING:
    from kvoffload_exporter.sources.gpu import Nvml
    from kvoffload_exporter.sources.host import SmapsCache

log = logging.getLogger("kvoffload.poller")


class Fleet(Protocol):
    """What the scheduler drives (the Exporter): it reads the configuration, the pollers and the self-stats,
    and hands every reading over through a call, never by writing the fleet's fields."""

    @property
    def config(self) -> Config: ...

    @property
    def targets(self) -> list[TargetPoller]: ...

    @property
    def probed(self) -> Mapping[str, TargetPoller]: ...

    @property
    def stats(self) -> SelfStats: ...

    def render(self) -> None:
        """Something changed."""

    def host_read(self, host: HostMemory | None, ok: bool, seconds: float) -> None:
        """The host collector's reading (None when it failed) and how long it took."""

    def gpu_read(self, gpu: tuple[GpuMemory, ...] | None, ok: bool, seconds: float) -> None:
        """The GPU collector's reading (None when it failed or is unavailable) and how long it took."""

    def all_polled(self) -> None:
        """Every configured target was polled once: the fleet is ready."""


WAVE = 32
"""Targets a poll wave holds (about): the interval holds ceil(targets / WAVE) waves, evenly spaced, each
target in one of them. A poll that wakes a sleeping process alone pays the wake-up and caches the other
processes left cold: polled one at a time, spread over the interval, 1,000 real-body targets cost
~0.8 ms of CPU a poll; in waves of 50, ~0.5 (docs/performance.md). A wave at most the default poll
slots' half keeps one wave's polls in flight together."""


class Scheduler:
    """Owns the loops (as tasks), the poll slots, the shared HTTP session (plugins') and the polls'
    keep-alive client once started."""

    def __init__(self, fleet: Fleet, timer: Callable[[], float], rng: random.Random | None = None) -> None:
        self.fleet = fleet
        self.timer = timer
        self.session: aiohttp.ClientSession | None = None
        self.client: PollClient | None = None  # the polls' connections, closed by `stop`
        self.slots = asyncio.Semaphore(fleet.config.max_concurrent_polls)  # bounds polls in flight
        self.loops: dict[TargetConfig, asyncio.Task[None]] = {}  # per configured target, for reload
        self._rng = rng or random.Random()  # unseeded: replicas must not start in lockstep
        self._origin = self._rng.random()  # where the waves fall in the interval (a fraction of it)
        self._tasks: list[asyncio.Task[None]] = []
        self._waves: dict[float, tuple[asyncio.Task[None], list[asyncio.Future[None]]]] = {}  # due -> timer, waiters
        self._nvml: Nvml | None = None  # once started (imported lazily: pynvml only where --collector.gpu)

    async def poll(self, poller: TargetPoller, session: Client) -> None:
        """One poll of any target (configured or probed) through the bounded slots."""
        async with self.slots:
            self.fleet.stats.poll_duration.observe(await poller.poll_once(session))
        self.fleet.render()

    async def target_loop(self, poller: TargetPoller, session: Client, first: bool = True) -> None:
        """Poll `poller` every `poll_interval` (read each round, so a reload applies) on the injected timer."""
        # First poll at once (through the slots, so a big fleet starts in batches): `up` must not read 0
        # before a target was ever polled. Then it joins a random one of the interval's waves and keeps it.
        fleet = self.fleet
        if first:
            await self.poll(poller, session)
            self._check_ready()
        now = self.timer()
        due = self._wave(now + self._rng.uniform(0.0, fleet.config.poll_interval))
        await self._until(due, now)
        while True:
            async with self.slots:
                fleet.stats.poll_lag.observe(max(0.0, self.timer() - due))
                fleet.stats.poll_duration.observe(await poller.poll_once(session))
            fleet.render()
            interval = fleet.config.poll_interval
            due += interval
            now = self.timer()
            if now > due:  # fell behind (slow target or saturated): skip the missed slots, keep the phase
                due += interval * int((now - due) / interval + 1)
            due = self._wave(due)  # the same moment, unless the fleet's size changed its waves
            await self._until(due, now)

    async def _until(self, due: float, now: float) -> None:
        """Sleep until `due`, a wave's moment, on the wave's one timer: a sleep of its own per target put a timer
        in the loop's heap, pushed and popped through Python comparisons (~3 % of a 1,000-target serve's CPU).
        A waiter cancelled (its target removed) leaves the others waiting."""
        fut = asyncio.get_running_loop().create_future()
        wave = self._waves.get(due)
        if wave is None:
            wave = self._waves[due] = (asyncio.create_task(self._ring(due, due - now)), [])
        wave[1].append(fut)
        await fut

    async def _ring(self, due: float, delay: float) -> None:
        try:
            await asyncio.sleep(delay)
        finally:  # also when stopped: every waiter is woken or already cancelled
            for fut in self._waves.pop(due, (None, ()))[1]:
                if not fut.done():
                    fut.set_result(None)

    def _wave(self, t: float) -> float:
        """The first wave at or after `t`: the interval holds ceil(targets / WAVE) waves, evenly spaced
        from this scheduler's origin (a moment already on a wave stays where it is)."""
        fleet = self.fleet
        interval = fleet.config.poll_interval
        step = interval / max(1, math.ceil((len(fleet.targets) + len(fleet.probed)) / WAVE))
        start = self._origin * interval
        return start + step * math.ceil((t - start) / step - 1e-6)

    def _check_ready(self) -> None:
        if all(t.polls for t in self.fleet.targets):
            self.fleet.all_polled()

    def mark_stale(self) -> None:
        """Every target (configured or probed) whose last poll is too old is served as down, now."""
        if any([t.mark_stale() for t in (*self.fleet.targets, *self.fleet.probed.values())]):
            self.fleet.render()

    async def _stale_loop(self) -> None:
        """Staleness is checked on the clock, not at the next poll: a loop that stopped never polls again."""
        while True:
            await asyncio.sleep(min(1.0, self.fleet.config.poll_interval))
            self.mark_stale()

    async def _loop_lag(self) -> None:
        """How late the event loop wakes a sleeper: what a scrape would wait at worst."""
        while True:
            started = self.timer()
            await asyncio.sleep(0.5)
            self.fleet.stats.loop_lag.append(max(0.0, self.timer() - started - 0.5))

    def _read_host(self, smaps: SmapsCache) -> HostMemory:
        from kvoffload_exporter.sources import host as host_source  # imported by _host_loop, in the loop's thread

        targets, config = self.fleet.targets, self.fleet.config
        pids = [(t.cfg.label, host_source.pids_for(t.cfg.pid, t.cfg.pidfile, t.cfg.local_port)) for t in targets]
        tiers = {t.cfg.label: b for t in targets if (b := t.view.total_tier_bytes) is not None}
        return host_source.read_host(config.proc_root, config.cgroup_root, pids, config.cgroup, tiers, smaps)

    async def _host_loop(self) -> None:
        from kvoffload_exporter.sources.host import SmapsCache  # psutil (2 MiB): only where --collector.host

        fleet = self.fleet
        smaps = SmapsCache()
        while True:
            started = self.timer()
            host: HostMemory | None
            try:
                host, ok = await asyncio.to_thread(self._read_host, smaps), True
            except Exception as e:  # a broken /proc or psutil must not stop the vLLM collector
                log.warning("host collector failed: %s", e)
                host, ok = None, False
            fleet.host_read(host, ok, self.timer() - started)
            await asyncio.sleep(fleet.config.poll_interval)

    async def _gpu_loop(self) -> None:
        from kvoffload_exporter.sources.gpu import GpuUnavailable, Nvml

        fleet = self.fleet
        nvml = Nvml()
        try:
            await asyncio.to_thread(nvml.start)
        except GpuUnavailable as e:
            log.warning("GPU collector disabled: %s", e)  # reported once; the rest keeps working
            fleet.gpu_read(None, False, 0.0)
            return
        self._nvml = nvml
        while True:
            started = self.timer()
            gpu: tuple[GpuMemory, ...] | None
            try:
                gpu, ok = await asyncio.to_thread(nvml.read), True
            except GpuUnavailable as e:
                log.warning("GPU read failed: %s", e)
                gpu, ok = None, False
            fleet.gpu_read(gpu, ok, self.timer() - started)
            await asyncio.sleep(fleet.config.poll_interval)

    def start(self, session: aiohttp.ClientSession) -> None:
        self.session = session
        self.client = client = PollClient()
        for t in self.fleet.targets:
            self.start_target(t, client)
        self.add_task(self._loop_lag())
        self.add_task(self._stale_loop())
        if self.fleet.config.host_enabled:
            self.add_task(self._host_loop())
        if self.fleet.config.gpu_enabled:
            self.add_task(self._gpu_loop())

    def start_target(self, poller: TargetPoller, session: Client, first: bool = True) -> None:
        self.loops[poller.cfg] = task = asyncio.create_task(self.target_loop(poller, session, first))
        self._tasks.append(task)

    def resize(self, previous: Config, config: Config) -> None:
        """A reload's poll slots: a new bound applies to polls that start from now (those in flight keep theirs)."""
        if config.max_concurrent_polls != previous.max_concurrent_polls:
            self.slots = asyncio.Semaphore(config.max_concurrent_polls)

    def reschedule(self, kept: set[TargetConfig], restart: bool, removed: Iterable[TargetConfig]) -> None:
        """After a reload: added targets start, `kept` ones restart on a new phase (without an extra poll)
        when the interval changed, removed ones stop. Nothing starts before `start`."""
        for t in self.fleet.targets:
            if self.session is None:
                continue
            fetcher: Client = self.client if self.client is not None else self.session
            if t.cfg not in kept:
                self.start_target(t, fetcher)
            elif restart and (task := self.loops.get(t.cfg)) is not None:
                task.cancel()
                self.start_target(t, fetcher, first=False)
        for tc in removed:
            if task := self.loops.pop(tc, None):
                task.cancel()

    def add_task(self, coro: Awaitable[None]) -> None:
        """Run `coro` until `stop`."""
        self._tasks.append(asyncio.ensure_future(coro))

    async def stop(self) -> None:
        self._tasks += [timer for timer, _ in self._waves.values()]  # the waves' timers, woken or not
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with suppress(asyncio.CancelledError, Exception):
                await task
        self._tasks.clear()
        if self.client is not None:
            await self.client.close()
        if self._nvml is not None:
            self._nvml.stop()

"""Polls every target on its own schedule, keeps bounded history and re-renders the exposition.

`/metrics` never triggers upstream I/O: the text is rebuilt after each poll (and each host/GPU read)
and served from memory, so several Prometheus replicas scraping one sidecar cost nothing upstream.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Awaitable, Callable
from contextlib import suppress
from typing import Any

import aiohttp

from exporter import derive
from exporter.collector import Collector, TargetView, collect
from exporter.config import Config, TargetConfig
from exporter.enums import CollectorName
from exporter.exposition import ParseError
from exporter.model import GpuMemory, HostMemory
from exporter.normalise import normalise
from exporter.sources import host as host_source
from exporter.sources.vllm_http import ScrapeError, fetch_metrics, fetch_version

log = logging.getLogger("kvoffload.poller")


class TargetPoller:
    """One vLLM target: poll → normalise → advance totals → derive over the window."""

    def __init__(self, cfg: TargetConfig, config: Config, clock: Callable[[], float] = time.time):
        self.cfg = cfg
        self.config = config
        self.clock = clock
        self.history: deque[derive.Point] = deque(maxlen=config.history_len)
        self.view = TargetView(label=cfg.label, url=cfg.url, tier_bytes=cfg.tier_bytes)
        self.errors: dict[str, int] = {}
        self.polls = 0
        self._version_checked = 0.0
        self._last_error_logged: str | None = None

    async def poll_once(self, session: aiohttp.ClientSession) -> None:
        started = time.monotonic()
        now = self.clock()
        version = self.view.version
        try:
            try:
                if version is None or now - self._version_checked > 300:  # /version can change on upgrade
                    version = await fetch_version(session, self.cfg.url, self.config.timeout) or version
                    self._version_checked = now
                text = await fetch_metrics(session, self.cfg.url, self.config.timeout, self.config.max_body_bytes)
                try:  # CPU-bound and capped: off the event loop, so /healthz and SIGTERM never wait on it
                    snapshot = await asyncio.to_thread(normalise, text, self.cfg.limits or self.config.limits)
                except ParseError as e:
                    raise ScrapeError(e.reason, str(e)) from e
                if not snapshot.families:
                    raise ScrapeError("parse", "no vllm: metrics in the body")
                prev = self.history[-1] if self.history else None
                point = derive.advance(prev, snapshot, now)
                derived = derive.derive([*self.history, point], now, self.config.window)
            except ScrapeError:
                raise
            except Exception as e:  # a bug must never stop polling or leave `up` stale
                log.exception("target %s: unexpected error while polling", self.cfg.label)
                raise ScrapeError("internal", f"{type(e).__name__}: {e}") from e
        except ScrapeError as e:
            self.errors[e.reason] = self.errors.get(e.reason, 0) + 1
            if e.detail != self._last_error_logged:  # log a failure once, not every poll
                log.warning("target %s: %s", self.cfg.label, e)
                self._last_error_logged = e.detail
            self.view = TargetView(
                label=self.cfg.label,
                url=self.cfg.url,
                up=False,
                errors=dict(self.errors),
                duration=time.monotonic() - started,
                last_success=self.view.last_success,
                version=version,
                tier_bytes=self.cfg.tier_bytes,
                last_error=e.reason,
            )
            return
        finally:
            self.polls += 1
        self._last_error_logged = None
        self.history.append(point)
        self.view = TargetView(
            label=self.cfg.label,
            url=self.cfg.url,
            up=True,
            errors=dict(self.errors),
            duration=time.monotonic() - started,
            body_bytes=len(text),
            last_success=now,
            version=version,
            snapshot=snapshot,
            derived=derived,
            tier_bytes=self.cfg.tier_bytes,
        )


class Exporter:
    """Owns the pollers, host/GPU reads and the rendered exposition bytes."""

    def __init__(self, config: Config, clock: Callable[[], float] = time.time):
        self.config = config
        self.clock = clock
        self.targets = [TargetPoller(t, config, clock) for t in config.targets]
        self.host: HostMemory | None = None
        self.gpu: tuple[GpuMemory, ...] | None = None
        self.collectors: dict[str, tuple[bool, float]] = {}
        self.extras: list[Collector] = []
        self.body = b""
        self._tasks: list[asyncio.Task[None]] = []
        self._nvml: Any = None  # sources.gpu.Nvml once started (imported lazily)
        self.render()

    def render(self) -> None:
        vllm_ok = all(t.view.up for t in self.targets) if self.targets else True
        durs = [t.view.duration or 0.0 for t in self.targets]
        self.collectors["vllm"] = (vllm_ok, max(durs, default=0.0))
        self.body = collect(
            [t.view for t in self.targets], self.config.window_label, self.host, self.gpu, self.collectors, self.extras
        ).encode()

    async def _target_loop(self, poller: TargetPoller, session: aiohttp.ClientSession) -> None:
        while True:
            started = time.monotonic()
            await poller.poll_once(session)
            self.render()
            await asyncio.sleep(max(0.0, self.config.poll_interval - (time.monotonic() - started)))

    def _read_host(self) -> HostMemory:
        pids = [(t.cfg.label, host_source.pids_for(t.cfg.pid, t.cfg.pidfile, t.cfg.local_port)) for t in self.targets]
        return host_source.read_host(self.config.proc_root, self.config.cgroup_root, pids, self.config.cgroup)

    async def _host_loop(self) -> None:
        while True:
            started = time.monotonic()
            try:
                self.host = await asyncio.to_thread(self._read_host)
                ok = True
            except Exception as e:  # a broken /proc or psutil must not stop the vLLM collector
                log.warning("host collector failed: %s", e)
                self.host, ok = None, False
            self.collectors["host"] = (ok, time.monotonic() - started)
            self.render()
            await asyncio.sleep(self.config.poll_interval)

    async def _gpu_loop(self) -> None:
        from exporter.sources.gpu import GpuUnavailable, Nvml

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
            started = time.monotonic()
            try:
                self.gpu = await asyncio.to_thread(nvml.read)
                ok = True
            except GpuUnavailable as e:
                log.warning("GPU read failed: %s", e)
                self.gpu, ok = None, False
            self.collectors["gpu"] = (ok, time.monotonic() - started)
            self.render()
            await asyncio.sleep(self.config.poll_interval)

    def start(self, session: aiohttp.ClientSession) -> None:
        for t in self.targets:
            self._tasks.append(asyncio.create_task(self._target_loop(t, session)))
        if self.config.host_enabled:
            self._tasks.append(asyncio.create_task(self._host_loop()))
        if self.config.gpu_enabled:
            self._tasks.append(asyncio.create_task(self._gpu_loop()))

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

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with suppress(asyncio.CancelledError, Exception):
                await task
        self._tasks.clear()
        if self._nvml is not None:
            self._nvml.stop()

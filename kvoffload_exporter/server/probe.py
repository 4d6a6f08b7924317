"""`/probe?target=URL[&name=]`: the multi-target pattern of blackbox_exporter and snmp_exporter.

Prometheus discovers vLLM pods and shards them over exporter replicas; each replica polls what it
is asked to probe and answers with that target's series only. The URL comes from the scraper, so
this is an SSRF surface: only configured targets, exact URLs of `probe.allow` and URLs matching
`probe.allow_regex` in full (linear-time matching, kvoffload_exporter.saferegex) are probed; anything else is
refused before any connection is made.

Bounded whatever the scrapers send:
- one probed target per normalised URL (scheme and host lower-cased, default port and trailing `/`
  dropped): `name=` labels it, it cannot multiply it (the name of the first probe stays until eviction);
- at most `probe.max_targets` kept; past that the least recently probed is dropped (counted), and a
  target not probed for `probe.idle_ttl` is dropped too;
- probe polls take slots of their own (`probe.max_concurrent_polls`), so configured targets keep
  their schedule however many probes wait;
- `name` obeys the label-value cap, the URL a length cap; probes closer together than half the poll
  interval (several Prometheus replicas) share one poll.

A reload (SIGHUP) rebuilds the allow-list from the new configuration: a target it adds is probed at
once (its first poll is awaited), one it removes is refused (403) and its poller dropped. A configured
target is served from kept state, never as live data once that is older than its staleness bound
(`up 0`, reason `stale`: kvoffload_exporter.server.targetpoller.STALE_POLLS).
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from contextlib import suppress
from urllib.parse import urlsplit

from kvoffload_exporter.config.settings import TargetConfig
from kvoffload_exporter.enums import ProbeEviction
from kvoffload_exporter.saferegex import MAX_TEXT, SafeRegex
from kvoffload_exporter.server.exporter import Exporter
from kvoffload_exporter.server.guards import GuardStats
from kvoffload_exporter.server.logbudget import LogBudget
from kvoffload_exporter.server.targetpoller import TargetPoller
from kvoffload_exporter.sources.vllm_http import Client

_DEFAULT_PORTS = {"http": 80, "https": 443}


class Forbidden(Exception):
    """The target is neither configured nor on the allow-list."""


class BadProbe(ValueError):
    """The request itself is unusable (URL or name too long, control characters): 400."""


def normalise_url(url: str) -> str:
    """One spelling per target: `HTTP://Host:80/` and `http://host` are the same base URL.
    Anything unusual (userinfo, query, fragment, a bad port) is returned as given, to be refused."""
    url = url.strip()
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        return url
    scheme, host = parts.scheme.lower(), (parts.hostname or "")
    if "@" in parts.netloc or parts.query or parts.fragment or not host or scheme not in _DEFAULT_PORTS:
        return url
    host = f"[{host}]" if ":" in host else host
    netloc = host if port in (None, _DEFAULT_PORTS[scheme]) else f"{host}:{port}"
    return f"{scheme}://{netloc}{parts.path.rstrip('/')}"


class Probes:
    def __init__(self, exporter: Exporter, guards: GuardStats | None = None) -> None:
        self.exp = exporter
        self.guards = guards or GuardStats()
        self._last_used: OrderedDict[str, float] = OrderedDict()  # LRU: least recently probed first
        self._locks: dict[str, asyncio.Lock] = {}
        # one log budget for every probed target: any client may name thousands of failing URLs
        self._logs = LogBudget(timer=exporter.timer)
        self._slots_for = exporter.config.probe_max_concurrent_polls
        self._slots = asyncio.Semaphore(self._slots_for)
        self.rebuild()
        exporter.reload_hooks.append(self.rebuild)

    def rebuild(self) -> None:
        """The allow-list of the exporter's configuration (at start and after each reload); probed
        targets it no longer allows, or that are now configured targets, are dropped (counted)."""
        cfg = self.exp.config
        self._configured = {normalise_url(t.cfg.url): t for t in self.exp.targets}
        self._exact = {normalise_url(u) for u in cfg.probe_allow}
        self._regex = SafeRegex(cfg.probe_allow_regex) if cfg.probe_allow_regex else None
        if cfg.probe_max_concurrent_polls != self._slots_for:  # probes in flight keep the old slots
            self._slots_for = cfg.probe_max_concurrent_polls
            self._slots = asyncio.Semaphore(self._slots_for)
        for key in [k for k in self.exp.probed if k in self._configured or not self._listed(k)]:
            self._drop(key, ProbeEviction.RELOAD)

    def allowed(self, url: str) -> bool:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.netloc or "@" in parts.netloc:
            return False  # credentials in the URL would end up in the `target` label
        if parts.query or parts.fragment:
            return False
        url = normalise_url(url)
        return url in self._configured or self._listed(url)

    def _listed(self, url: str) -> bool:
        """On `probe.allow` or matching `probe.allow_regex` (`url` normalised)."""
        return url in self._exact or bool(self._regex and self._regex.fullmatch(url))

    def _check(self, url: str, name: str) -> None:
        if len(url) > MAX_TEXT:
            raise BadProbe(f"target URL over {MAX_TEXT} characters")
        limit = (self.exp.config.limits.label_value_length_limit) or 1024
        if len(name) > limit:
            raise BadProbe(f"name over {limit} characters (limits.label_value_length_limit)")
        if any(ord(ch) < 0x20 or ord(ch) == 0x7F for ch in name):
            raise BadProbe("name has control characters")

    async def probe(self, url: str, name: str, session: Client) -> TargetPoller:
        """The poller for `url` (configured, or created on first probe), polled unless it just was."""
        self._check(url, name)
        if not self.allowed(url):
            raise Forbidden(url)
        key = normalise_url(url)
        configured = self._configured.get(key)
        if configured is not None:  # polled on its own schedule: serve its kept state
            if not configured.polled.is_set():  # just added (start, reload): its first poll is on its way
                with suppress(TimeoutError):
                    await asyncio.wait_for(configured.polled.wait(), self.exp.config.timeout + 1.0)
            if configured.mark_stale():
                self.exp.render()
            return configured
        self.evict()
        poller = self.exp.probed.get(key)
        if poller is None:
            while len(self.exp.probed) >= self.exp.config.probe_max_targets:
                self._drop(next(iter(self._last_used)), ProbeEviction.CAPACITY)
            poller = TargetPoller(
                TargetConfig(url=key, name=name), self.exp.config, self.exp.clock, self.exp.timer, self._logs
            )
            self.exp.probed[key] = poller
            self.exp.render()
        self._last_used[key] = self.exp.timer()
        self._last_used.move_to_end(key)
        lock = self._locks.setdefault(key, asyncio.Lock())
        try:
            async with lock:
                last = poller.last_poll
                if last is None or self.exp.timer() - last >= self.exp.config.poll_interval / 2:
                    async with self._slots:  # not the configured targets' slots
                        self.exp.stats.poll_duration.observe(await poller.poll_once(session))
                    self.exp.render()
        finally:
            if key not in self.exp.probed and not lock.locked():  # evicted while it polled
                self._locks.pop(key, None)
        return poller

    async def sweep_forever(self) -> None:
        """Evict idle targets even when no probe arrives any more (Prometheus moved them elsewhere)."""
        while True:
            await asyncio.sleep(min(60.0, self.exp.config.probe_idle_ttl / 4))
            self.evict()

    def _drop(self, key: str, why: ProbeEviction) -> None:
        self._last_used.pop(key, None)
        lock = self._locks.get(key)
        if lock is None or not lock.locked():
            self._locks.pop(key, None)
        self.exp.probed.pop(key, None)
        self.guards.evict(why)
        self.exp.render()

    def evict(self) -> int:
        """Forget probed targets idle for longer than the TTL; returns how many were dropped."""
        cutoff = self.exp.timer() - self.exp.config.probe_idle_ttl
        stale = []
        for k, t in self._last_used.items():  # least recently probed first: stop at the first fresh one
            if t >= cutoff:
                break
            stale.append(k)
        for k in stale:
            self._drop(k, ProbeEviction.IDLE)
        return len(stale)

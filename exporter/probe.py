"""`/probe?target=URL[&name=]`: the multi-target pattern of blackbox_exporter and snmp_exporter.

Prometheus discovers vLLM pods and shards them over exporter replicas; each replica polls what it
is asked to probe and answers with that target's series only. The URL comes from the scraper, so
this is an SSRF surface: only configured targets, exact URLs of `probe.allow` and URLs matching
`probe.allow_regex` in full are probed; anything else is refused before any connection is made.

A probed target keeps its history between probes (windows and ratios need several points); a target
not probed for `probe.idle_ttl` seconds is forgotten. Probes closer together than half the poll
interval (several Prometheus replicas) share one poll.
"""

from __future__ import annotations

import asyncio
import re
from urllib.parse import urlsplit

import aiohttp

from exporter.config import TargetConfig
from exporter.poller import Exporter
from exporter.targetpoller import TargetPoller


class Forbidden(Exception):
    """The target is neither configured nor on the allow-list."""


def normalise_url(url: str) -> str:
    return url.strip().rstrip("/")


class Probes:
    def __init__(self, exporter: Exporter) -> None:
        self.exp = exporter
        cfg = exporter.config
        self._configured = {normalise_url(t.cfg.url): t for t in exporter.targets}
        self._exact = {normalise_url(u) for u in cfg.probe_allow}
        self._regex = re.compile(cfg.probe_allow_regex) if cfg.probe_allow_regex else None
        self._last_used: dict[tuple[str, str], float] = {}
        self._locks: dict[tuple[str, str], asyncio.Lock] = {}

    def allowed(self, url: str) -> bool:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.netloc or "@" in parts.netloc:
            return False  # credentials in the URL would end up in the `target` label
        return url in self._configured or url in self._exact or bool(self._regex and self._regex.fullmatch(url))

    async def probe(self, url: str, name: str, session: aiohttp.ClientSession) -> TargetPoller:
        """The poller for `url` (configured, or created on first probe), polled unless it just was."""
        url = normalise_url(url)
        if not self.allowed(url):
            raise Forbidden(url)
        configured = self._configured.get(url)
        if configured is not None and (not name or name == configured.cfg.label):
            return configured  # polled on its own schedule: serve its kept state
        self.evict()
        key = (url, name)
        poller = self.exp.probed.get(key)
        if poller is None:
            poller = TargetPoller(TargetConfig(url=url, name=name), self.exp.config, self.exp.clock, self.exp.timer)
            self.exp.probed[key] = poller
            self.exp.render()
        self._last_used[key] = self.exp.timer()
        async with self._locks.setdefault(key, asyncio.Lock()):
            last = poller.last_poll
            if last is None or self.exp.timer() - last >= self.exp.config.poll_interval / 2:
                await self.exp.poll(poller, session)
        return poller

    async def sweep_forever(self) -> None:
        """Evict idle targets even when no probe arrives any more (Prometheus moved them elsewhere)."""
        while True:
            await asyncio.sleep(min(60.0, self.exp.config.probe_idle_ttl / 4))
            self.evict()

    def evict(self) -> int:
        """Forget probed targets idle for longer than the TTL; returns how many were dropped."""
        cutoff = self.exp.timer() - self.exp.config.probe_idle_ttl
        stale = [k for k, t in self._last_used.items() if t < cutoff]
        for k in stale:
            del self._last_used[k]
            self._locks.pop(k, None)
            self.exp.probed.pop(k, None)
        if stale:
            self.exp.render()
        return len(stale)

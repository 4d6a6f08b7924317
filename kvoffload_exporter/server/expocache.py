"""The exposition served from memory: the fragments merged once per generation, gzipped once per generation.

`/metrics` never triggers upstream I/O. Each target keeps its own rendered fragment, rebuilt only when that
target polls; a scrape merges the fragments once per generation (any change bumps it) and the merged and
gzipped bytes are cached for that generation, so the work per scrape stays flat from one target to a thousand.
"""

from __future__ import annotations

import asyncio
import gzip
import os
import zlib
from collections.abc import Callable, Mapping

from prometheus_client import CollectorRegistry, GCCollector, PlatformCollector, ProcessCollector

from kvoffload_exporter.expose import gzipparts
from kvoffload_exporter.expose.render import merge
from kvoffload_exporter.expose.selfmon import SelfStats

Fragments = Callable[[], list[Mapping[str, str]]]
"""Every fragment of the exposition, shared one first, read when a generation is merged."""


def merge_interval(poll_interval: float) -> float:
    """The shortest time between two generations: a tenth of the poll interval, at most a second."""
    return min(1.0, poll_interval / 10)


class ExpositionCache:
    """The merged and gzipped bodies of the current generation, per format."""

    def __init__(
        self,
        fragments: Fragments,
        stats: SelfStats,
        timer: Callable[[], float],
        poll_interval: float,
        runtime_metrics: bool = True,
    ) -> None:
        self._fragments = fragments
        self._stats = stats
        self._timer = timer
        self.generation = 0  # bumped by publish() when something changed
        self.min_merge = merge_interval(poll_interval)
        self._dirty = True
        self._merged_at: float | None = None
        self._runtime = _runtime_registry() if runtime_metrics else None
        self._cache: dict[tuple[int, bool, bool], bytes] = {}
        self.gzip_lock = asyncio.Lock()
        self._gzipped: dict[bool, tuple[float, bytes]] = {}  # per format: (its generation's publish time, body)

    def changed(self) -> None:
        """Something changed: a later scrape merges again."""
        self._dirty = True

    def retime(self, poll_interval: float) -> None:
        """A reload changed the poll interval: generations follow it."""
        self.min_merge = merge_interval(poll_interval)

    def publish(self) -> None:
        """Pending changes become a new generation, at most once per `min_merge` seconds: at 1000
        targets a poll lands every few milliseconds, and merging (and gzipping) megabytes for each
        scrape would cost more than the polls themselves."""
        now = self._timer()
        if self._dirty and (self._merged_at is None or now - self._merged_at >= self.min_merge):
            self.generation += 1
            self._dirty = False
            self._merged_at = now

    def exposition(self, openmetrics: bool = False) -> bytes:
        """The merged exposition of this generation; merged at most once per generation and format."""
        self.publish()
        key = (self.generation, openmetrics, False)
        cached = self._cache.get(key)
        if cached is None:
            cached = self._merge(openmetrics)
            self._keep(key, cached)
        return cached

    def _merge(self, openmetrics: bool) -> bytes:
        started = self._timer()
        body = merge(self._fragments(), openmetrics, self._runtime_text(openmetrics)).encode()
        self._stats.render_seconds = self._timer() - started
        return body

    def _keep(self, key: tuple[int, bool, bool], body: bytes) -> None:
        self._cache = {k: v for k, v in self._cache.items() if k[0] == self.generation}
        self._cache[key] = body

    async def gzip_exposition(self, openmetrics: bool = False) -> bytes:
        """The gzipped body of this generation, compressed once (off the loop) however many ask.

        While one scrape compresses a newer generation, another is given the last compressed body if
        that one's generation was published under `2 * min_merge` ago: no older than a scrape just
        before the new generation could have got, and it does not wait. At 1,000 targets the merge
        and gzip of 9.4 MB take ~50-130 ms on 2 busy cores; ten scrapers queued behind each one.

        The merged body it compresses is kept only if an uncompressed scrape asked for it first: Prometheus
        asks for gzip, and the uncompressed body would be held until the next generation is merged (9.4 MB
        at 1,000 targets) for scrapes that do not come; an uncompressed scrape after it merges once more."""
        self.publish()
        key = (self.generation, openmetrics, True)
        last = self._gzipped.get(openmetrics)
        if key not in self._cache and self.gzip_lock.locked() and last is not None:
            published, body = last
            if self._timer() - published < 2 * self.min_merge:
                return body
        async with self.gzip_lock:
            cached = self._cache.get(key)
            if cached is None:
                published = self._merged_at or 0.0
                plain = self._cache.get((key[0], openmetrics, False))
                cached = await _gzip(self._merge(openmetrics) if plain is None else plain)
                del plain  # not held while the compressed body waits for its turn
                if key[0] == self.generation:  # else it is already stale: serve it, do not keep it
                    self._keep(key, cached)
                    self._gzipped[openmetrics] = (published, cached)
        return cached

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

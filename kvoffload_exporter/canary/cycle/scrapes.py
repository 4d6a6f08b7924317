"""The canary's `/metrics` reads: normalised snapshots per role, the last one cached for the next
phase's "before", the first raw text kept as evidence."""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from kvoffload_exporter.canary.types import ErrorReason
from kvoffload_exporter.canary.wire.errors import CycleFailed
from kvoffload_exporter.canary.wire.protocol import MetricsError
from kvoffload_exporter.ingest.exposition import ParseError
from kvoffload_exporter.ingest.normalise import normalise
from kvoffload_exporter.ingest.snapshot import Snapshot


class MetricsSource(Protocol):
    async def metrics(self, base_url: str) -> str: ...


class Scrapes:
    def __init__(
        self, client: MetricsSource, url_of: Callable[[str], str], clock: Callable[[], float], fresh_for: float
    ):
        self.client = client
        self.url_of = url_of
        self.clock = clock
        self.fresh_for = fresh_for  # seconds an after-scrape still serves as the next "before"
        self.first: dict[str, str] = {}  # role → raw /metrics text (evidence)
        self._last: dict[str, tuple[float, Snapshot]] = {}

    async def scrape(self, role: str, keep_first: bool = False) -> Snapshot:
        """A new snapshot; CycleFailed when unreadable (without counters a probe cannot be classified)."""
        url = self.url_of(role)
        try:
            text = await self.client.metrics(url)
            snap = normalise(text)
        except ParseError as e:
            raise CycleFailed(f"{url}/metrics unreadable: {e}", reason=ErrorReason.METRICS) from None
        except MetricsError as e:
            raise CycleFailed(f"{url}/metrics: {e}", reason=ErrorReason.METRICS) from None
        if not snap.families:
            raise CycleFailed(f"{url}/metrics has no vllm: families", reason=ErrorReason.METRICS)
        if keep_first and role not in self.first:
            self.first[role] = text
        self._last[role] = (self.clock(), snap)
        return snap

    async def before(self, role: str) -> Snapshot:
        """The previous phase's after-scrape when it is fresh, else a new scrape (tight windows)."""
        cached = self._last.get(role)
        if cached is not None and self.clock() - cached[0] <= self.fresh_for:
            return cached[1]
        return await self.scrape(role)

    def last(self, role: str) -> Snapshot | None:
        cached = self._last.get(role)
        return cached[1] if cached else None

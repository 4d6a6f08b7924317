"""Counters of what the exporter refused to protect itself, exported as one collector (serve's app).

Pure: the listener, the auth middleware and /probe bump these; `collect` writes them as catalogue
families, every reason pre-created at 0 so `rate()` works from the first refusal."""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field

from kvoffload_exporter.catalogue import HTTP_REJECT_REASONS, PROBE_EVICTIONS, VERSION_ERROR_REASONS
from kvoffload_exporter.enums import HttpRejectReason, ProbeEviction
from kvoffload_exporter.expose.collector import SampleSink
from kvoffload_exporter.server.logbudget import BOUNDS
from kvoffload_exporter.sources.version import VERSION_ERRORS

MAX_TRUSTED = 1024


@dataclass
class GuardStats:
    connections: int = 0
    rejected: dict[HttpRejectReason, int] = field(default_factory=dict)
    evicted: dict[ProbeEviction, int] = field(default_factory=dict)
    trusted: OrderedDict[str, None] = field(default_factory=OrderedDict)
    """Client addresses answered with a success before (authenticated, with basic auth): the listener
    keeps a reserve of its slots for them (server.connslots). LRU, `MAX_TRUSTED` addresses."""

    def trust(self, peer: str | None) -> None:
        if not peer:
            return
        self.trusted[peer] = None
        self.trusted.move_to_end(peer)
        if len(self.trusted) > MAX_TRUSTED:
            self.trusted.popitem(last=False)

    def is_trusted(self, peer: str) -> bool:
        return peer in self.trusted

    def reject(self, reason: HttpRejectReason) -> None:
        self.rejected[reason] = self.rejected.get(reason, 0) + 1

    def evict(self, reason: ProbeEviction, n: int = 1) -> None:
        self.evicted[reason] = self.evicted.get(reason, 0) + n

    def collect(self, x: SampleSink) -> None:
        x.add("kvoffload_exporter_http_connections", float(self.connections), {})
        for r in HTTP_REJECT_REASONS:
            x.add("kvoffload_exporter_http_rejected_total", float(self.rejected.get(r, 0)), {"reason": r})
        for e in PROBE_EVICTIONS:
            x.add("kvoffload_exporter_probe_evictions_total", float(self.evicted.get(e, 0)), {"reason": e})
        x.add("kvoffload_exporter_log_lines_suppressed_total", float(BOUNDS.suppressed), {})
        x.add("kvoffload_exporter_label_churn_total", float(BOUNDS.label_churn), {})
        for v in VERSION_ERROR_REASONS:
            x.add("kvoffload_exporter_version_errors_total", float(VERSION_ERRORS.get(v, 0)), {"reason": v})

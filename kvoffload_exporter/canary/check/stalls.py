"""Requests that stalled in the server's queue: reported beside the statistics, never silently averaged; pure.

vLLM's per-request metrics (`--enable-per-request-metrics`, 0.25+) give each response's `queue_time_ms`.
An offload hit waits in the queue while its KV loads, and a burst of c requests queues behind itself, so
peers are the requests of the same phase and concurrency (the same kind of wait). A request whose queue
time is above its peers' median + max(50 ms, 5 robust standard deviations) and above 3 x that median
stalled: its client TTFT measures the queue, not the tier, and the report names it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TypedDict

from kvoffload_exporter.canary.cycle.records import RequestRecord
from kvoffload_exporter.canary.cycle.stats import median

MIN_PEERS = 5
FLOOR_SECONDS = 0.050


class StalledRequest(TypedDict):
    """One stalled probe request (`stalled_requests` of the check document)."""

    cycle: int
    phase: str
    concurrency: int
    queue_seconds: float
    peers_median_queue_seconds: float
    ttft_seconds: float | None


def _queue_seconds(m: Mapping[str, object] | None) -> float | None:
    raw = (m or {}).get("queue_time_ms")
    if isinstance(raw, bool) or not isinstance(raw, (int, float)):
        return None
    v = float(raw) / 1000.0
    return v if v - v == 0.0 and v >= 0 else None


def stalled(requests: Iterable[RequestRecord]) -> list[StalledRequest]:
    """The stalled probe requests: cycle, phase, queue seconds and the peers' median."""
    by_phase: dict[tuple[str, int], list[tuple[RequestRecord, float]]] = {}
    for r in requests:
        q = _queue_seconds(r.server_metrics)
        if q is not None and r.kind in ("probe", "burst"):
            by_phase.setdefault((r.phase, r.concurrency or 1), []).append((r, q))
    out: list[StalledRequest] = []
    for (phase, c), rows in by_phase.items():
        if len(rows) < MIN_PEERS:
            continue
        qs = [q for _, q in rows]
        m = median(qs)
        mad = median([abs(q - m) for q in qs]) * 1.4826
        limit = max(m + max(FLOOR_SECONDS, 5 * mad), 3 * m)
        for r, q in rows:
            if q > limit:
                out.append(
                    {
                        "cycle": r.cycle,
                        "phase": phase,
                        "concurrency": c,
                        "queue_seconds": round(q, 6),
                        "peers_median_queue_seconds": round(m, 6),
                        "ttft_seconds": r.ttft_seconds,
                    }
                )
    return sorted(out, key=lambda x: (x["cycle"], x["phase"]))


__all__ = ["StalledRequest", "stalled"]

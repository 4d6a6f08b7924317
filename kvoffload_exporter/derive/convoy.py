"""The passive convoy view: are offload loads serialising concurrent requests right now? Pure.

From the families vLLM 0.33 exports next to the offload counters (vllm#44294: concurrent requests that
share a prefix being loaded wait for it, TTFT 5.95 s → 11.46 s): the deferred-lookup delay
(`vllm:kv_offload_lookup_async_delay_seconds`) p99, waiting requests by KV-fetch stage
(`vllm:num_requests_kv_fetch_by_stage`) and queue-time quantiles (`vllm:request_queue_time_seconds`),
each over the exporter's window. A histogram whose count went down (engine restart) or whose buckets
changed restarts from its raw counts, like derive's TTFT.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from kvoffload_exporter.derive.history import PackedPoint
from kvoffload_exporter.derive.window import Mark, histogram_quantile, window_start
from kvoffload_exporter.ingest.snapshot import EngineKey, EngineSignals, Histogram

QUEUE_QUANTILES = (0.5, 0.9, 0.99)
DELAY_QUANTILE = 0.99


@dataclass(frozen=True)
class ConvoyView:
    lookup_delay_p99: float | None = None
    lookup_delay_count: float = 0.0  # deferred lookups in the window
    queue_time: Mapping[float, float] = field(default_factory=dict)  # quantile → seconds
    queue_time_count: float = 0.0  # queued requests in the window
    fetch_by_stage: Mapping[str, float] = field(default_factory=dict)  # last value per stage


def _counts(start: Histogram | None, end: Histogram) -> tuple[float, ...]:
    if start is None or start.bounds != end.bounds or end.count < start.count:
        return end.counts
    return tuple([d if (d := a - b) > 0.0 else 0.0 for a, b in zip(end.counts, start.counts)])  # max(0.0, d)


def _window(start: Histogram | None, end: Histogram | None) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """(bounds, the window's cumulative counts); empty without the family."""
    return ((), ()) if end is None else (end.bounds, _counts(start, end))


Hists = tuple[Histogram | None, Histogram | None]
"""An engine's (lookup async delay, queue time) histograms: what the view reads of a window's start."""


def engine_view(start: Hists | None, end: EngineSignals) -> ConvoyView:
    """The convoy view of one engine between two scrapes (start: its histograms then; None: since the
    engine started)."""
    s_delay, s_queue = start if start is not None else (None, None)
    qb, qc = _window(s_queue, end.queue_time)
    queue = {q: v for q in QUEUE_QUANTILES if (v := histogram_quantile(q, qb, qc)) is not None}
    db, dc = _window(s_delay, end.lookup_async_delay)
    delay = histogram_quantile(DELAY_QUANTILE, db, dc)
    return ConvoyView(delay, dc[-1] if dc else 0.0, queue, qc[-1] if qc else 0.0, dict(end.kv_fetch_by_stage))


def _start(p: Mark, key: EngineKey) -> Hists | None:
    """The engine's histograms at the window's start: a packed point reads them without a snapshot."""
    if isinstance(p, PackedPoint):
        return p.convoy_hists(key)
    e = p.snapshot.engine(key)
    return None if e is None else (e.lookup_async_delay, e.queue_time)


def derive(history: Sequence[Mark], now: float, window: float) -> dict[EngineKey, ConvoyView]:
    """Windowed convoy views for every engine of the newest point (`history` oldest-first)."""
    if not history:
        return {}
    end, start = history[-1], window_start(history, now, window)
    # One point in the window: start is end, every delta is 0 and no quantile is given (as in derive).
    return {e.key: engine_view(_start(start, e.key), e) for e in end.snapshot.engines}


__all__ = ["ConvoyView", "derive", "engine_view"]

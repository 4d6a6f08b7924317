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

from exporter.derive import Point, histogram_quantile, window_start
from exporter.model import EngineKey, EngineSignals, Histogram

QUEUE_QUANTILES = (0.5, 0.9, 0.99)
DELAY_QUANTILE = 0.99


@dataclass(frozen=True)
class ConvoyView:
    lookup_delay_p99: float | None = None
    queue_time: Mapping[float, float] = field(default_factory=dict)  # quantile → seconds
    fetch_by_stage: Mapping[str, float] = field(default_factory=dict)  # last value per stage


def _counts(start: Histogram | None, end: Histogram) -> tuple[float, ...]:
    if start is None or start.bounds != end.bounds or end.count < start.count:
        return end.counts
    return tuple(max(0.0, a - b) for a, b in zip(end.counts, start.counts))


def _quantile(q: float, start: Histogram | None, end: Histogram | None) -> float | None:
    if end is None:
        return None
    return histogram_quantile(q, end.bounds, _counts(start, end))


def engine_view(start: EngineSignals | None, end: EngineSignals) -> ConvoyView:
    """The convoy view of one engine between two scrapes (start None: since the engine started)."""
    queue: dict[float, float] = {}
    for q in QUEUE_QUANTILES:
        v = _quantile(q, start.queue_time if start else None, end.queue_time)
        if v is not None:
            queue[q] = v
    delay = _quantile(DELAY_QUANTILE, start.lookup_async_delay if start else None, end.lookup_async_delay)
    return ConvoyView(delay, queue, dict(end.kv_fetch_by_stage))


def derive(history: Sequence[Point], now: float, window: float) -> dict[EngineKey, ConvoyView]:
    """Windowed convoy views for every engine of the newest point (`history` oldest-first)."""
    if not history:
        return {}
    end, start = history[-1], window_start(history, now, window)
    # One point in the window: start is end, every delta is 0 and no quantile is given (as in derive).
    return {e.key: engine_view(start.snapshot.engine(e.key), e) for e in end.snapshot.engines}


__all__ = ["ConvoyView", "derive", "engine_view"]

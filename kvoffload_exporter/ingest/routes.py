"""Each selected family's sample into its engine's accumulators: one handler per family, one route per
family (`ROUTES`), so `normalise` folds a sample with one lookup and at most one call.

Why a module of its own: the handlers are the per-family meaning of a sample (a counter summed over
pid children, a gauge's max, a histogram's bucket); `normalise` only walks the samples and freezes.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable

from kvoffload_exporter.ingest import backends
from kvoffload_exporter.ingest.exposition import Labels
from kvoffload_exporter.ingest.families import TABLE as _TABLE
from kvoffload_exporter.ingest.samples import Hist as _Hist
from kvoffload_exporter.ingest.samples import finite as _finite
from kvoffload_exporter.ingest.signalmap import (
    BY_SOURCE,
    CACHE_INFO,
    COUNTERS,
    FETCH_STAGE,
    FLAT,
    FLAT_SIZE,
    GAUGES,
    LEGACY,
    LEGACY_SIZE,
    LOOKUP_DELAY,
    OFFLOAD_INFO,
    PREFILL,
    QUEUE_TIME,
    TTFT,
)
from kvoffload_exporter.ingest.snapshot import Signal

_INF = float("inf")


def _gauge(prev: float | None, value: float) -> float | None:
    """max of pid children; a NaN/±Inf gauge is dropped (absent, never exported), not a failed poll."""
    if value - value != 0.0:
        return prev
    return value if prev is None else max(prev, value)


class Engine:
    """Mutable accumulator for one engine while a scrape is being read."""

    def __init__(self) -> None:
        self.counters: dict[Signal, float] = {}
        self.legacy: dict[Signal, float] = {}
        self.by_source: dict[str, float] = defaultdict(float)
        self.gauges: dict[Signal, float] = {}
        self.hists: dict[str, _Hist] = defaultdict(_Hist)  # or histplan.Done: read by position
        self.cache_config: dict[str, str] = {}
        self.offload_config: dict[str, str] = {}
        self.fetch_stage: dict[str, float] = {}


def transfer_direction(rest: Labels) -> int | None:
    """Index 0 = load (CPU_to_GPU, or anything *_to_GPU), 1 = store (GPU_to_*); labels are mixed case."""
    for k, v in rest:
        if k == "transfer_type":
            src, _, dst = v.lower().partition("_to_")
            if dst == "gpu":
                return 0
            if src == "gpu":
                return 1
            return None
    return None


def _add(d: dict[Signal, float], k: Signal, v: float) -> None:
    total = d.get(k, 0.0) + v  # sums children that differ only by pid
    # finite and >= 0, tested inline; `_finite` (two calls) only to raise the error it always raised
    d[k] = total if 0.0 <= v < _INF and total < _INF else _finite(d.get(k, 0.0) + _finite(v, k), k)


def _on_flat(e: Engine, fam: str, sfx: str, value: float, rest: Labels, le: float | None) -> None:
    _add(e.counters, FLAT[fam], value)


def _on_legacy(e: Engine, fam: str, sfx: str, value: float, rest: Labels, le: float | None) -> None:
    d = transfer_direction(rest)
    if d is not None:
        _add(e.legacy, LEGACY[fam][d], value)


def _on_counter(e: Engine, fam: str, sfx: str, value: float, rest: Labels, le: float | None) -> None:
    _add(e.counters, COUNTERS[fam], value)


def _on_prefill(e: Engine, fam: str, sfx: str, value: float, rest: Labels, le: float | None) -> None:
    if sfx == "sum":
        _add(e.counters, PREFILL[fam], value)


def _on_gauge(e: Engine, fam: str, sfx: str, value: float, rest: Labels, le: float | None) -> None:
    sig = GAUGES[fam]
    # pid-split gauges (multiprocess mode) go stale per process: max is advisory, never a sum.
    v = _gauge(e.gauges.get(sig), value)
    if v is not None:
        e.gauges[sig] = v


def on_hist(e: Engine, fam: str, sfx: str, value: float, rest: Labels, le: float | None) -> None:
    if sfx:
        e.hists[fam].add(sfx, value, le)


def on_legacy_size(e: Engine, fam: str, sfx: str, value: float, rest: Labels, le: float | None) -> None:
    d = transfer_direction(rest)
    if d is not None and sfx:
        e.hists[LEGACY_SIZE_NAMES[d]].add(sfx, value, le)


LEGACY_SIZE_NAMES = ("legacy:load", "legacy:store")
"""The accumulators of the transfer_type size histogram, by `transfer_direction`."""


def _on_by_source(e: Engine, fam: str, sfx: str, value: float, rest: Labels, le: float | None) -> None:
    for k, v in rest:
        if k == "source":
            e.by_source[v] = _finite(e.by_source[v] + _finite(value, fam), fam)


def _on_fetch_stage(e: Engine, fam: str, sfx: str, value: float, rest: Labels, le: float | None) -> None:
    for k, v in rest:
        if k == "stage":
            prev = e.fetch_stage.get(v)
            e.fetch_stage[v] = value if prev is None else max(prev, value)  # a gauge: max over pids


def hist_name(fam: str, rest: Labels) -> str | None:
    """The histogram accumulator a sample of `fam` feeds (histplan groups those), else None."""
    evidence, handler = ROUTES[fam]
    if evidence:
        return None
    if handler is on_hist:
        return fam
    d = transfer_direction(rest) if handler is on_legacy_size else None
    return None if d is None else LEGACY_SIZE_NAMES[d]


def idle(fam: str, sfx: str) -> bool:
    """A sample normalise's loop would only step over: a prefill histogram's buckets and `_count` (its
    `_sum` is the signal; 35 of a real body's 61 samples outside the histograms read by position)."""
    evidence, handler = ROUTES[fam]
    return handler is _on_prefill and sfx != "sum" and not evidence


_Handler = Callable[[Engine, str, str, float, Labels, float | None], None]
HANDLERS: dict[str, _Handler] = {
    **{f: _on_flat for f in FLAT},
    **{f: _on_legacy for f in LEGACY},
    **{f: _on_counter for f in COUNTERS},
    **{f: _on_gauge for f in GAUGES},
    **{f: on_hist for f in (*FLAT_SIZE, TTFT, LOOKUP_DELAY, QUEUE_TIME)},
    FETCH_STAGE: _on_fetch_stage,
    LEGACY_SIZE: on_legacy_size,
    BY_SOURCE: _on_by_source,
    **{f: _on_prefill for f in PREFILL},
}
INFO = frozenset({CACHE_INFO, OFFLOAD_INFO})
ROUTES: dict[str, tuple[bool, _Handler | None]] = {f: (f in backends.FAMILIES, HANDLERS.get(f)) for f in _TABLE}
"""Family → (handed to the backend resolver, this module's handler): one lookup per sample. A deprecated
family (`families.ALIASES`) has no handler: `normalise` reads its samples as its current family's when
that one is absent, whatever the type."""

__all__ = ["INFO", "LEGACY_SIZE_NAMES", "ROUTES", "Engine", "hist_name", "idle", "on_hist", "transfer_direction"]

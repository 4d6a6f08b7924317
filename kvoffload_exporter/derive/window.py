"""Pure derivation: reset-aware accumulation of snapshots and windowed evidence per engine.

The clock is passed in. `advance()` folds a new snapshot into reset-adjusted running totals (a
counter that goes down means the engine restarted: the new raw value is the increase, so a restart
never yields a negative delta or a spike); `derive()` compares the newest point with the oldest point
inside the window; `interval()` does the same for two snapshots (inspect, canary).

A gap is a gap, not a reset to zero: a counter missing from a scrape keeps its last total and raw
value, so when it comes back the increase across the gap is counted; when no other poll lies inside
the window (an outage longer than it) the newest earlier poll is the start. `store_without_load`
needs stores older than the window start, since the engine's last (re)start: during warm-up the tier
is filling and the state is `storing`. An engine seen in one poll only has no window and no derivation:
`derive()` leaves it out, so no state is exported for it until its second poll.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from operator import add, sub
from typing import Protocol, TypeVar

from kvoffload_exporter.derive.capacity import chunk_tokens
from kvoffload_exporter.derive.resets import VLLM_SOURCE, accumulate, accumulate_by, missing, resets, store_base, stores
from kvoffload_exporter.enums import State
from kvoffload_exporter.ingest.backends.schema import Evidence, EvidenceKey, NativeUnit
from kvoffload_exporter.ingest.snapshot import EngineKey, Histogram, Signal, Snapshot

K = TypeVar("K", bound=Hashable)

QUANTILES = (0.5, 0.9, 0.99)
_STORE = Signal.OFFLOAD_STORE_BYTES
REUSE_SOURCES = ("local_cache_hit", "external_kv_transfer")


@dataclass(frozen=True, slots=True)
class Totals:
    """Reset-adjusted cumulative values of one engine (monotonic while the exporter runs)."""

    counters: Mapping[Signal, float]
    by_source: Mapping[str, float]
    ttft_bounds: tuple[float, ...] = ()
    ttft_counts: tuple[float, ...] = ()
    raw: Mapping[Signal, float] = field(default_factory=dict)  # last raw counter values seen, kept across gaps
    raw_by_source: Mapping[str, float] = field(default_factory=dict)
    store_base: float = 0.0  # total offload_store_bytes at the engine's last restart
    # The one evidence schema (kvoffload_exporter.ingest.backends): totals, last raw values, stores at the last restart.
    evidence: Mapping[EvidenceKey, float] = field(default_factory=dict)
    raw_evidence: Mapping[EvidenceKey, float] = field(default_factory=dict)
    evidence_store_base: Mapping[EvidenceKey, float] = field(default_factory=dict)
    # Series of a source (an extra endpoint, or vLLM's body) seen before and absent from this scrape: its
    # fetch failed or its process restarted without them. While any is missing the state is unknown.
    missing: frozenset[EvidenceKey] = frozenset()
    forgiven: frozenset[EvidenceKey] = frozenset()  # absent since their source restarted: not expected back
    origin: Mapping[EvidenceKey, int] = field(default_factory=dict)  # source of each series (0: vLLM's body)


@dataclass(frozen=True, slots=True)
class Point:
    t: float
    snapshot: Snapshot
    totals: Mapping[EngineKey, Totals]


class Mark(Protocol):
    """A point as the window derivations read it: a whole `Point`, or an older one packed by
    `kvoffload_exporter.derive.history` (its totals without raw values, its snapshot with only the convoy
    view's histograms)."""

    @property
    def t(self) -> float: ...

    @property
    def snapshot(self) -> Snapshot: ...

    @property
    def totals(self) -> Mapping[EngineKey, Totals]: ...


@dataclass(frozen=True, slots=True)
class EngineDerived:
    """What happened on one engine between two points. Undefined ratios are None, never NaN."""

    key: EngineKey
    configured: bool
    window_seconds: float
    deltas: Mapping[Signal, float]
    by_source: Mapping[str, float]
    state: State
    load_store_ratio: float | None = None
    load_bandwidth: float | None = None
    store_bandwidth: float | None = None
    gpu_hit_ratio: float | None = None
    external_hit_ratio: float | None = None
    ttft_quantiles: Mapping[float, float] = field(default_factory=dict)
    ttft_count: float = 0.0
    evidence: Mapping[EvidenceKey, float] = field(default_factory=dict)  # deltas of cumulative series
    evidence_gauges: Mapping[EvidenceKey, float] = field(default_factory=dict)  # last values
    ratio_unit: NativeUnit | None = None  # the one unit load_store_ratio was computed in
    prefill_seconds_per_token: float | None = None
    state_known: bool = True  # False while a source's series are missing: `state` is then not exported


MIN_PREFILL_TOKENS = 1024.0
"""Fewer prefilled tokens in a window measure each request's fixed step, not a cost per token (two
full hits of the H200 run prefilled 52 tokens in 46 ms: 892 µs per token against 11 µs over a cold run)."""


def prefill_cost(deltas: Mapping[Signal, float], by_source: Mapping[str, float]) -> float | None:
    """Δ prefill seconds / Δ prefilled tokens (the per-request histogram's own token sum, else
    `local_compute`); None with under MIN_PREFILL_TOKENS. A mean: each request's fixed step is in it."""
    tokens = deltas.get(Signal.PREFILL_COMPUTED_TOKENS, by_source.get("local_compute"))
    if tokens is None or tokens < MIN_PREFILL_TOKENS:
        return None
    return _ratio(deltas.get(Signal.PREFILL_SECONDS), tokens)


def computed_tokens(deltas: Mapping[Signal, float], by_source: Mapping[str, float]) -> float | None:
    """Prompt tokens the engine prefilled itself (not served from a cache): the per-request histogram's
    token sum, else `local_compute`, else prompt tokens less prefix hits; None when none is exported."""
    tokens = deltas.get(Signal.PREFILL_COMPUTED_TOKENS, by_source.get("local_compute"))
    if tokens is not None or Signal.PROMPT_TOKENS not in deltas:
        return tokens
    hits = deltas.get(Signal.GPU_PREFIX_HITS, 0.0) + deltas.get(Signal.EXTERNAL_PREFIX_HITS, 0.0)
    return max(0.0, deltas[Signal.PROMPT_TOKENS] - hits)


def _ttft_totals(
    prev: Totals | None, p: Histogram | None, c: Histogram | None, reset: bool
) -> tuple[tuple[float, ...], tuple[float, ...]]:
    if c is None:
        return (), ()
    if prev is None or p is None or prev.ttft_bounds != c.bounds or len(p.counts) != len(c.counts):
        return c.bounds, c.counts  # new or re-bucketed histogram: start over from its raw counts
    inc = c.counts if reset else tuple(map(sub, c.counts, p.counts))
    return c.bounds, tuple(map(add, prev.ttft_counts, inc))


def advance(prev: Mark | None, snapshot: Snapshot, t: float) -> Point:
    """Fold `snapshot` taken at time `t` into the running totals of `prev` (the newest point: whole)."""
    totals: dict[EngineKey, Totals] = {}
    for e in snapshot.engines:
        p_tot = prev.totals.get(e.key) if prev else None
        if p_tot is None:
            totals[e.key] = Totals(
                dict(e.counters),
                dict(e.prompt_tokens_by_source),
                *(_ttft_totals(None, None, e.ttft, False)),
                raw=dict(e.counters),
                raw_by_source=dict(e.prompt_tokens_by_source),
                evidence=dict(e.evidence),
                raw_evidence=dict(e.evidence),
                origin=e.evidence_origin,
            )
            continue
        p_sig = prev.snapshot.engine(e.key) if prev else None
        found = resets(p_tot, p_sig, e)
        reset = VLLM_SOURCE in found
        origin = {**p_tot.origin, **e.evidence_origin} if e.evidence_origin else p_tot.origin
        raw_evidence = {**p_tot.raw_evidence, **e.evidence}
        absent, forgiven = missing(p_tot, raw_evidence, e, found)
        counters = accumulate(p_tot.counters, p_tot.raw, e.counters, reset)
        totals[e.key] = Totals(
            counters,
            accumulate(p_tot.by_source, p_tot.raw_by_source, e.prompt_tokens_by_source, reset),
            *_ttft_totals(p_tot, p_sig.ttft if p_sig else None, e.ttft, reset),
            raw={**p_tot.raw, **e.counters},
            raw_by_source={**p_tot.raw_by_source, **e.prompt_tokens_by_source},
            store_base=p_tot.counters.get(_STORE, 0.0) if reset else p_tot.store_base,
            evidence=accumulate_by(p_tot.evidence, p_tot.raw_evidence, e.evidence, found, origin),
            raw_evidence=raw_evidence,
            evidence_store_base=store_base(p_tot, found, origin),
            missing=absent,
            forgiven=forgiven,
            origin=origin,
        )
    return Point(t, snapshot, totals)


def _ratio(num: float | None, den: float | None) -> float | None:
    """num/den; None where undefined or not finite (1e300 bytes in 1e-300 s), never NaN/Inf."""
    if num is None or not den or den <= 0:
        return None
    r = num / den
    return r if r - r == 0.0 else None


def histogram_quantile(q: float, bounds: Sequence[float], counts: Sequence[float]) -> float | None:
    """Prometheus' histogram_quantile on cumulative counts (last = +Inf). None when empty."""
    if not counts or counts[-1] <= 0:
        return None
    rank = q * counts[-1]
    for i, c in enumerate(counts):
        if c >= rank:
            if i >= len(bounds):
                return bounds[-1] if bounds else None  # +Inf bucket: the highest finite bound
            lower = bounds[i - 1] if i > 0 else 0.0
            below = counts[i - 1] if i > 0 else 0.0
            upper = bounds[i]
            if c == below:
                return upper
            return lower + (upper - lower) * (rank - below) / (c - below)
    return bounds[-1] if bounds else None


def _moved(evidence: Mapping[EvidenceKey, float], signal: Evidence) -> bool:
    """Any positive delta of `signal` in any unit: a state asks only "did it happen", never adds units."""
    return any(v > 0 for k, v in evidence.items() if k.signal == signal)


def evidence_state(
    configured: bool,
    deltas: Mapping[Signal, float],
    by_source: Mapping[str, float],
    stored_before: bool | Callable[[], bool] = True,
    evidence: Mapping[EvidenceKey, float] | None = None,
    chunk: float | None = None,
) -> State:
    """not_configured → hit (loads) → not_storing (no stores although the engine computed more prompt
    tokens than one offload chunk, and at least MIN_PREFILL_TOKENS) → idle (nothing moved) →
    store_without_load (stores while the workload shows reuse: GPU prefix hits or cache-hit tokens, and
    the tier already held stores before the window: `stored_before`, or a callable asked only here: it reads
    a packed point, which most polls never need) → storing (also the warm-up state).
    Loads and stores are the backend's own in any unit (bytes, blocks, chunks, tokens: ingest.backends)
    or the offload bytes. A GPU-hit revisit computes only its last block: it stays idle."""
    if not configured:
        return State.NOT_CONFIGURED
    ev = evidence or {}
    if deltas.get(Signal.OFFLOAD_LOAD_BYTES, 0.0) > 0 or _moved(ev, Evidence.LOADED):
        return State.HIT
    if deltas.get(Signal.OFFLOAD_STORE_BYTES, 0.0) <= 0 and not _moved(ev, Evidence.STORED):
        computed = computed_tokens(deltas, by_source) or 0.0
        return State.NOT_STORING if computed > max(chunk or 0.0, MIN_PREFILL_TOKENS) else State.IDLE
    reuse = (
        deltas.get(Signal.GPU_PREFIX_HITS, 0.0) > 0
        or deltas.get(Signal.EXTERNAL_PREFIX_HITS, 0.0) > 0
        or any(by_source.get(s, 0.0) > 0 for s in REUSE_SOURCES)
    )
    if not reuse:
        return State.STORING
    held = stored_before() if callable(stored_before) else stored_before
    return State.STORE_WITHOUT_LOAD if held else State.STORING


_RATIO_UNITS = (NativeUnit.BYTES, NativeUnit.BLOCKS, NativeUnit.CHUNKS, NativeUnit.TOKENS)


def unit_ratio(evidence: Mapping[EvidenceKey, float]) -> tuple[float | None, NativeUnit | None]:
    """Loaded / stored in the first unit both are counted in (summed over tiers and connectors, which
    are disjoint); never across units. (None, None) when no unit has stores."""
    for unit in _RATIO_UNITS:
        stored = [v for k, v in evidence.items() if k.signal == Evidence.STORED and k.unit == unit]
        loaded = [v for k, v in evidence.items() if k.signal == Evidence.LOADED and k.unit == unit]
        if stored and loaded:
            return _ratio(sum(loaded), sum(stored)), unit
    return None, None


def _diff(a: Mapping[K, float], b: Mapping[K, float] | None, new_from_zero: bool = False) -> dict[K, float]:
    """Deltas of the series at both ends (b None: since start); `new_from_zero`: a series first seen at the
    end counts from 0 (evidence series appear at their first event), else it is left out."""
    if b is None:
        return dict(a)
    # `d if d > 0.0 else 0.0` is max(0.0, d) exactly (NaN and -0.0 give 0.0), without a call per key
    if new_from_zero:
        return {k: d if (d := v - b.get(k, 0.0)) > 0.0 else 0.0 for k, v in a.items()}
    return {k: d if (d := v - b[k]) > 0.0 else 0.0 for k, v in a.items() if k in b}


def stored_before(anchor: Mark | None, end: Mark, key: EngineKey) -> bool:
    """Did the tier hold stores at `anchor` (a point at or before the window start) since the
    engine's last restart? Without that, stores with reuse but no load are the tier filling up."""
    a = anchor.totals.get(key) if anchor else None
    if a is None:
        return False
    base = end.totals[key].evidence_store_base
    if any(v > base.get(k, 0.0) for k, v in stores(a.evidence).items()):
        return True  # a backend counting blocks, chunks or tokens (kvoffload_exporter.ingest.backends)
    return a.counters.get(_STORE, 0.0) > end.totals[key].store_base


def compare(start: Mark | None, end: Mark, key: EngineKey, anchor: Mark | bool | None = True) -> EngineDerived:
    """Derived values for one engine between two points (start None: since the engine started).

    `anchor`: the point whose stores count as older than the window (True: `start`)."""
    tot = end.totals[key]
    s_tot = start.totals.get(key) if start is not None else None  # not `if start`: a packed point is a
    # Mapping, whose truth would cost a __len__ call (and an empty one has no totals for `key` either way)
    window = end.t - start.t if start is not None and s_tot is not None else 0.0
    d = _diff(tot.counters, s_tot.counters if s_tot else None)
    by_source = _diff(tot.by_source, s_tot.by_source if s_tot else None)
    ttft: dict[float, float] = {}
    ttft_count = 0.0
    if tot.ttft_counts:
        counts = tot.ttft_counts
        if s_tot and s_tot.ttft_bounds == tot.ttft_bounds and s_tot.ttft_counts:
            counts = tuple([n if (n := a - b) > 0.0 else 0.0 for a, b in zip(tot.ttft_counts, s_tot.ttft_counts)])
        ttft_count = counts[-1]
        for q in QUANTILES:
            v = histogram_quantile(q, tot.ttft_bounds, counts)
            if v is not None:
                ttft[q] = v
    configured = end.snapshot.offload_configured
    ev = _diff(tot.evidence, s_tot.evidence if s_tot else None, new_from_zero=True)
    ratio, ratio_unit = unit_ratio(ev)
    if d.get(Signal.OFFLOAD_STORE_BYTES):
        ratio = _ratio(d.get(Signal.OFFLOAD_LOAD_BYTES), d.get(Signal.OFFLOAD_STORE_BYTES))
        ratio_unit = NativeUnit.BYTES
    cur = end.snapshot.engine(key)
    return EngineDerived(
        key=key,
        configured=configured,
        window_seconds=window,
        deltas=d,
        by_source=by_source,
        state=evidence_state(
            configured,
            d,
            by_source,
            lambda: stored_before(start if anchor is True else anchor or None, end, key),
            ev,
            chunk_tokens(cur) if cur else None,
        ),
        load_store_ratio=ratio,
        load_bandwidth=_ratio(d.get(Signal.OFFLOAD_LOAD_BYTES), d.get(Signal.OFFLOAD_LOAD_SECONDS)),
        store_bandwidth=_ratio(d.get(Signal.OFFLOAD_STORE_BYTES), d.get(Signal.OFFLOAD_STORE_SECONDS)),
        gpu_hit_ratio=_ratio(d.get(Signal.GPU_PREFIX_HITS), d.get(Signal.GPU_PREFIX_QUERIES)),
        external_hit_ratio=_ratio(d.get(Signal.EXTERNAL_PREFIX_HITS), d.get(Signal.EXTERNAL_PREFIX_QUERIES)),
        ttft_quantiles=ttft,
        ttft_count=ttft_count,
        prefill_seconds_per_token=prefill_cost(d, by_source),
        evidence=ev,
        evidence_gauges=dict(cur.evidence_gauges) if cur else {},
        ratio_unit=ratio_unit if ratio is not None else None,
        state_known=not tot.missing,
    )


def window_start(history: Sequence[Mark], now: float, window: float) -> Mark:
    """The oldest point not older than `window` seconds (the newest point if none other is)."""
    for p in history:
        if p.t >= now - window:
            return p
    return history[-1]


def _anchor(history: Sequence[Mark], edge: float, key: EngineKey) -> Mark | None:
    """The newest point at or before `edge` that holds `key`. The history is oldest-first, so these points
    are its front (one or two as the window slides): scanned from the left, never all of it."""
    anchor = None
    for p in history:
        if p.t > edge:
            break
        if key in p.totals:
            anchor = p
    return anchor


def derive(history: Sequence[Mark], now: float, window: float) -> dict[EngineKey, EngineDerived]:
    """Windowed derivations for every engine of the newest point that has an earlier one (a window needs
    two samples: an engine seen once is left out, so nothing is claimed for it). `history` is oldest-first."""
    if not history:
        return {}
    end = history[-1]
    start = window_start(history, now, window)
    out = {}
    for key in end.totals:
        # An engine that appeared inside the window is compared from its first point.
        first: Mark | None = next((p for p in history if p.t >= start.t and key in p.totals), end)
        if first is end:  # nothing else inside the window (an outage): compare across the gap
            first = next((p for p in reversed(history) if p.t < start.t and key in p.totals), None)
        if first is None:  # one sample: no window yet, so no state (never `idle`, which claims no traffic)
            continue
        out[key] = compare(first, end, key, _anchor(history, now - window, key))
    return out


def interval(before: Snapshot | None, after: Snapshot) -> dict[EngineKey, EngineDerived]:
    """What happened between two scrapes (before None: everything since the engines started)."""
    p0 = advance(None, before, 0.0) if before is not None else None
    p1 = advance(p0, after, 1.0)
    return {key: compare(p0 if before is not None else None, p1, key) for key in p1.totals}


__all__ = [
    "EngineDerived",
    "Mark",
    "Point",
    "Totals",
    "advance",
    "compare",
    "computed_tokens",
    "derive",
    "evidence_state",
    "histogram_quantile",
    "interval",
    "prefill_cost",
]

"""A target's history: the newest point whole, every older one packed to what derivation reads. Pure.

The history holds `window / poll_interval` points per target (63 at 5 m / 5 s). Whole, a point of the
real vLLM 0.26.0 body costs ~13 KiB in ~60 objects (the snapshot's every histogram, the totals' dicts of
boxed floats). An older point is only ever read as a window start or anchor: its time, its totals
(`derive.compare`, `derive.stored_before`) and the convoy view's two histograms (`convoy.derive`).
`push` packs the point it supersedes into the bytes of one `array('d')` of exactly those numbers behind a
layout shared by every point of the same shape (one per vLLM version and engine set, not one per point):
~0.6 KiB a point, and one object the cycle collector walks (bytes are not tracked). Fewer tracked objects
keep the collector's full passes short at 1,000 targets, where each one stalls the event loop. What is
read back is built from the same floats, so every derivation is unchanged (tests/test_history.py).
"""

from __future__ import annotations

from array import array
from collections import Counter, deque
from collections.abc import Iterator, Mapping
from itertools import accumulate
from typing import Any, NamedTuple

from kvoffload_exporter.derive.window import Mark, Point, Totals
from kvoffload_exporter.ingest.backends.schema import EvidenceKey
from kvoffload_exporter.ingest.snapshot import EngineKey, EngineSignals, Generation, Histogram, Signal, Snapshot


class _Entry(NamedTuple):
    """Where one engine's totals sit in a packed point's values (`spans` are lengths, in field order)."""

    counters: tuple[Signal, ...]
    by_source: tuple[str, ...]
    evidence: tuple[EvidenceKey, ...]
    store_bases: tuple[EvidenceKey, ...]
    ttft_bounds: tuple[float, ...]
    spans: tuple[int, ...]  # counters, by_source, evidence, store_bases, ttft counts, store_base (1)


class _Engine(NamedTuple):
    """One snapshot engine as the convoy view reads a window start: two optional histograms."""

    key: EngineKey
    delay: tuple[tuple[float, ...], int] | None  # (bucket bounds, how many counts); then sum and count
    queue: tuple[tuple[float, ...], int] | None


class _Layout(NamedTuple):
    shape: tuple[Any, ...]
    generation: Generation
    keys: dict[EngineKey, int]  # totals key -> index in entries
    entries: tuple[_Entry, ...]
    starts: tuple[int, ...]  # where each entry's values start
    hists: int  # where the engines' histograms start (after every entry's values)
    engines: tuple[_Engine, ...]


_LAYOUTS: dict[tuple[Any, ...], _Layout] = {}
"""Shape → layout, shared by every packed point of that shape. Bounded: a churning target only starts
the table over (a layout held by a point stays valid)."""
_MAX_LAYOUTS = 1024
_MAX_LAYOUT_CHARS = 1 << 20
"""Characters of engine keys the shared table holds at most: 1,024 layouts of 64 engines with
1,000-character `model_name`s would otherwise pin ~64 MiB of label values (label churn)."""
_layout_chars = 0
_NO_RAW: dict[Any, float] = {}  # never read from an older point (derive.advance reads the newest one)


def _hist_shape(h: Histogram | None) -> tuple[tuple[float, ...], int] | None:
    return None if h is None else (h.bounds, len(h.counts))


def _layout(p: Point, hint: _Layout | None = None) -> _Layout:
    """The layout of `p`'s shape: `hint` (the target's last one) when it fits, else the shared table's."""
    totals = tuple(
        (k, tuple(t.counters), tuple(t.by_source), tuple(t.evidence), tuple(t.evidence_store_base), t.ttft_bounds,
         len(t.ttft_counts))
        for k, t in p.totals.items()
    )  # fmt: skip
    engines = tuple(
        _Engine(e.key, _hist_shape(e.lookup_async_delay), _hist_shape(e.queue_time)) for e in p.snapshot.engines
    )
    shape = (p.snapshot.generation, totals, engines)
    if hint is not None and hint.shape == shape:
        return hint  # past _MAX_LAYOUTS targets the table churns; a target still shares its own
    got = _LAYOUTS.get(shape)
    if got is None:
        entries = tuple(
            _Entry(c, b, ev, sb, tb, (len(c), len(b), len(ev), len(sb), n, 1)) for _, c, b, ev, sb, tb, n in totals
        )
        *starts, hists = accumulate((sum(e.spans) for e in entries), initial=0)
        keys = {k: i for i, (k, *_) in enumerate(totals)}
        got = _Layout(shape, p.snapshot.generation, keys, entries, tuple(starts), hists, engines)
        global _layout_chars
        chars = sum(len(m) + len(e) for m, e in keys)
        if len(_LAYOUTS) >= _MAX_LAYOUTS or _layout_chars + chars > _MAX_LAYOUT_CHARS:
            _LAYOUTS.clear()
            _layout_chars = 0
        _LAYOUTS[shape] = got
        _layout_chars += chars
    return got


def _hist_values(h: Histogram | None) -> tuple[float, ...]:
    return () if h is None else (*h.counts, h.sum, h.count)


class PackedPoint(Mapping[EngineKey, Totals]):
    """An older point: its time and its numbers as the bytes of one array of doubles. Read as a
    `derive.Mark`: `totals` is the point itself (a mapping whose `in` costs a dict lookup; a value is built
    when read) and `snapshot` is built when read, with each engine's two convoy histograms."""

    __slots__ = ("_layout", "_values", "t")
    _layout: _Layout

    def __init__(self, p: Point, hint: PackedPoint | None = None):
        self.t = p.t
        self._layout = _layout(p, hint._layout if hint is not None else None)
        values: list[float] = []
        for t in p.totals.values():
            values += (*t.counters.values(), *t.by_source.values(), *t.evidence.values())
            values += (*t.evidence_store_base.values(), *t.ttft_counts, t.store_base)
        for e in p.snapshot.engines:
            values += (*_hist_values(e.lookup_async_delay), *_hist_values(e.queue_time))
        # bytes, not the array: the cycle collector tracks an array (63,000 of them at 1,000 targets, every
        # full collection walking each) but not bytes, read back through a memoryview of doubles
        self._values = array("d", values).tobytes()

    @property
    def totals(self) -> Mapping[EngineKey, Totals]:
        return self

    def __contains__(self, key: object) -> bool:
        return key in self._layout.keys

    def __iter__(self) -> Iterator[EngineKey]:
        return iter(self._layout.keys)

    def __len__(self) -> int:
        return len(self._layout.keys)

    def get(self, key: EngineKey, default: Any = None) -> Any:  # Mapping.get's try/except, without the raise
        return self[key] if key in self._layout.keys else default

    def __getitem__(self, key: EngineKey) -> Totals:
        layout = self._layout
        i = layout.keys[key]
        e = layout.entries[i]
        a, b, c, d, f, g, _ = accumulate(e.spans, initial=layout.starts[i])
        v = memoryview(self._values).cast("d")
        return Totals(
            dict(zip(e.counters, v[a:b])),
            dict(zip(e.by_source, v[b:c])),
            e.ttft_bounds,
            tuple(v[f:g]),
            raw=_NO_RAW,
            raw_by_source=_NO_RAW,
            store_base=v[g],
            evidence=dict(zip(e.evidence, v[c:d])),
            raw_evidence=_NO_RAW,
            evidence_store_base=dict(zip(e.store_bases, v[d:f])),
        )

    def convoy_hists(self, key: EngineKey) -> tuple[Histogram | None, Histogram | None] | None:
        """The engine's (lookup delay, queue time) histograms, as `snapshot` holds them (None: no such
        engine), without building a snapshot: the convoy view reads only these, of the window's start."""
        v, pos = memoryview(self._values).cast("d"), self._layout.hists
        for e in self._layout.engines:
            delay, pos = _hist(e.delay, v, pos)
            queue, pos = _hist(e.queue, v, pos)
            if e.key == key:
                return delay, queue
        return None

    @property
    def snapshot(self) -> Snapshot:
        v, pos = memoryview(self._values).cast("d"), self._layout.hists
        engines = []
        for e in self._layout.engines:
            delay, pos = _hist(e.delay, v, pos)
            queue, pos = _hist(e.queue, v, pos)
            engines.append(EngineSignals(e.key[0], e.key[1], {}, lookup_async_delay=delay, queue_time=queue))
        return Snapshot(self._layout.generation, tuple(engines))


def _hist(shape: tuple[tuple[float, ...], int] | None, v: memoryview[float], pos: int) -> tuple[Histogram | None, int]:
    if shape is None:
        return None, pos
    bounds, n = shape  # n counts as packed, whatever made the histogram
    return Histogram(bounds, tuple(v[pos : pos + n]), v[pos + n], v[pos + n + 1]), pos + n + 2


def pack(p: Point, hint: Mark | None = None) -> Mark:
    """An older point: its time, its totals and the engines' convoy histograms, as the bytes of one array
    (with the layout of `hint`, the point packed before it, when the shape is the same)."""
    return PackedPoint(p, hint if isinstance(hint, PackedPoint) else None)


def push(history: deque[Mark], point: Point, held: Counter[EngineKey] | None = None, budget: int = 0) -> int:
    """Append the newest point; the one it supersedes (read whole by the next `derive.advance`) is packed.

    With `held` (engine key -> points of `history` holding it, kept up to date here), the oldest points
    are dropped while the history holds more than `budget` distinct keys: label values that churn cannot
    grow it past the budget. Returns how many were dropped that way."""
    if history and isinstance(history[-1], Point):
        history[-1] = pack(history[-1], history[-2] if len(history) > 1 else None)
    if held is None:
        history.append(point)
        return 0
    if history.maxlen is not None and len(history) >= history.maxlen and history:
        _forget(held, history[0])  # about to fall off the left end
    history.append(point)
    held.update(point.totals.keys())
    dropped = 0
    while len(held) > budget and len(history) > 1:
        _forget(held, history.popleft())
        dropped += 1
    return dropped


def _forget(held: Counter[EngineKey], mark: Mark) -> None:
    for k in mark.totals:
        held[k] -= 1
        if held[k] <= 0:
            del held[k]


__all__ = ["PackedPoint", "pack", "push"]

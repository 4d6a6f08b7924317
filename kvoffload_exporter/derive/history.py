"""A target's history: the newest point whole, every older one packed to what derivation reads. Pure.

The history holds `window / poll_interval` points per target (63 at 5 m / 5 s). Whole, a point of the
real vLLM 0.26.0 body costs ~13 KiB in ~60 objects (the snapshot's every histogram, the totals' dicts of
boxed floats). An older point is only ever read as a window start or anchor: its time, its totals
(`derive.compare`, `derive.stored_before`) and the convoy view's two histograms (`convoy.derive`).
`push` packs the point it supersedes into exactly those numbers (~70 doubles, ~0.6 KiB) behind a layout
shared by every point of the same shape (one per vLLM version and engine set, not one per point), in blocks of
BLOCK consecutive points: a full block is encoded once (differences of the doubles, deflated: ~70 bytes a point)
and decoded once when the derivation reads it, at the window's left end. A packed point is its time, its block
and its place in it; bytes are not tracked by the cycle collector, so few objects are (its full passes stall the
event loop at 1,000 targets). What is read back is the same floats, bit for bit, so every derivation is unchanged
(tests/test_history.py, tests/test_history_blocks.py).
"""

from __future__ import annotations

import struct
import zlib
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
    packer: struct.Struct  # a point's doubles, native order (read back through a memoryview of doubles)


_LAYOUTS: dict[tuple[Any, ...], _Layout] = {}
"""Shape → layout, shared by every packed point of that shape. Bounded: a churning target only starts
the table over (a layout held by a point stays valid)."""
_MAX_LAYOUTS = 1024
_MAX_LAYOUT_CHARS = 1 << 20
"""Characters of engine keys the shared table holds at most: 1,024 layouts of 64 engines with
1,000-character `model_name`s would otherwise pin ~64 MiB of label values (label churn)."""
_layout_chars = 0
BLOCK = 8
"""Points a block holds: the block still filling and the one decoded at the window's left end keep ~half a
block each of raw points (~4 × 0.6 KiB), against deflate's set-up and ratio, which favour longer blocks."""
_WBITS = 12  # deflate's window (4 KiB): a block's byte planes repeat within a few hundred bytes
_NO_RAW: dict[Any, float] = {}  # never read from an older point (derive.advance reads the newest one)


def _layout(p: Point, hint: _Layout | None = None) -> _Layout:
    """The layout of `p`'s shape: `hint` (the target's last one) when it fits, else the shared table's."""
    totals = tuple(
        (k, tuple(t.counters), tuple(t.by_source), tuple(t.evidence), tuple(t.evidence_store_base), t.ttft_bounds,
         len(t.ttft_counts))
        for k, t in p.totals.items()
    )  # fmt: skip
    engines = tuple(
        (e.key, None if (d := e.lookup_async_delay) is None else (d.bounds, len(d.counts)),
         None if (q := e.queue_time) is None else (q.bounds, len(q.counts)))
        for e in p.snapshot.engines
    )  # fmt: skip
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
        size = hists + sum(h[1] + 2 for e in engines for h in e[1:] if h is not None)
        layout = (p.snapshot.generation, keys, entries, tuple(starts), hists, tuple(_Engine(*e) for e in engines))
        got = _Layout(shape, *layout, struct.Struct(f"={size}d"))
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


class _Block:
    """Up to BLOCK consecutive packed points of one layout, in push order. While it fills, `vals` holds
    each point's doubles as bytes; once full (or when the next point's layout differs) it is sealed: `data`
    is the deflated, byte-shuffled differences of the points' doubles and `vals` is None until derivation
    reads a point, when the block is decoded once and `vals` caches the points from the one read on
    (a reader moves forward a point a poll: the window's left end). The cache goes with the block."""

    __slots__ = ("data", "layout", "vals")

    def __init__(self, layout: _Layout, values: bytes) -> None:
        self.layout = layout
        self.vals: list[bytes | None] | None = [values]
        self.data = b""

    def seal(self) -> None:
        """Encode the filled block once: the doubles of each point less those of the point before (as
        integers modulo 2**64 a double, borrowing across doubles: exact, and ~0 for counters that barely
        moved), each double's byte k next to the other doubles' byte k, deflated at level 1."""
        vals = self.vals
        assert vals is not None and all(v is not None for v in vals)
        raw = b"".join(vals)  # type: ignore[arg-type]
        size, width = len(raw), 8 * len(vals[0])  # type: ignore[arg-type]
        f = int.from_bytes(raw, "little")
        delta = ((f - (f << width)) & ((1 << 8 * size) - 1)).to_bytes(size, "little")
        z = zlib.compressobj(1, zlib.DEFLATED, -_WBITS, 4)  # small window and hash: a cheap set-up
        self.data = z.compress(b"".join([delta[k::8] for k in range(8)])) + z.flush()
        self.vals = None

    def values(self, i: int) -> bytes:
        """Point `i`'s doubles, decoding the sealed block if it is not cached from point `i - 1` on."""
        vals = self.vals
        if vals is not None and (got := vals[i]) is not None:
            if i >= 2 and self.data:  # decoded: the reader has moved past point i - 2 (it reads i - 1 at most)
                vals[i - 2] = None
            return got
        n = self.layout.packer.size
        if not n:
            return b""  # a point without engines
        shuffled = zlib.decompress(self.data, -_WBITS)
        size = len(shuffled)
        delta = bytearray(size)
        plane = size // 8
        for k in range(8):
            delta[k::8] = shuffled[k * plane : (k + 1) * plane]
        mask, width = (1 << 8 * n) - 1, 8 * n
        out: list[bytes | None] = [None] * (size // n)
        prev = carry = 0
        for j in range(len(out)):  # each point is the one before plus its difference (and the carry of it)
            v = prev + int.from_bytes(delta[j * n : (j + 1) * n], "little") + carry
            prev, carry = v & mask, v >> width
            if j >= i - 1:
                out[j] = prev.to_bytes(n, "little")
        self.vals = out
        return out[i]  # type: ignore[return-value]


class PackedPoint(Mapping[EngineKey, Totals]):
    """An older point: its time and where its numbers are (a block, and its place in it). Read as a
    `derive.Mark`: `totals` is the point itself (a mapping whose `in` costs a dict lookup; a value is built
    when read) and `snapshot` is built when read, with each engine's two convoy histograms."""

    __slots__ = ("_block", "_i", "t")
    _block: _Block
    _i: int

    def __init__(self, p: Point, hint: PackedPoint | None = None):
        self.t = p.t
        layout = _layout(p, hint._block.layout if hint is not None else None)
        values: list[float] = []
        for t in p.totals.values():
            values += (*t.counters.values(), *t.by_source.values(), *t.evidence.values())
            values += (*t.evidence_store_base.values(), *t.ttft_counts, t.store_base)
        for e in p.snapshot.engines:
            values += (*_hist_values(e.lookup_async_delay), *_hist_values(e.queue_time))
        # bytes, not an array: the cycle collector tracks an array (63,000 of them at 1,000 targets, every
        # full collection walking each) but not bytes, read back through a memoryview of doubles
        raw = layout.packer.pack(*values)
        block = hint._block if hint is not None else None
        if block is not None and not block.data and hint is not None and hint._i == len(block.vals or ()) - 1:
            if block.layout is not layout:  # the shape changed: that block ends short, this one starts anew
                block.seal()
                block = None
        else:
            block = None  # no block filling behind `hint`: this point starts one
        if block is None or block.vals is None:
            block = _Block(layout, raw)
        else:
            block.vals.append(raw)
        self._block, self._i = block, len(block.vals or ()) - 1
        if self._i == BLOCK - 1:
            block.seal()

    @property
    def _layout(self) -> _Layout:
        return self._block.layout

    @property
    def _values(self) -> bytes:
        """This point's doubles (decoded from its block if it is sealed)."""
        return self._block.values(self._i)

    @property
    def totals(self) -> Mapping[EngineKey, Totals]:
        return self

    def __contains__(self, key: object) -> bool:
        return key in self._block.layout.keys

    def __iter__(self) -> Iterator[EngineKey]:
        return iter(self._block.layout.keys)

    def __len__(self) -> int:
        return len(self._block.layout.keys)

    def get(self, key: EngineKey, default: Any = None) -> Any:  # Mapping.get's try/except, without the raise
        return self[key] if key in self._block.layout.keys else default

    def __getitem__(self, key: EngineKey) -> Totals:
        layout = self._block.layout
        i = layout.keys[key]
        e = layout.entries[i]
        a, b, c, d, f, g, _ = accumulate(e.spans, initial=layout.starts[i])
        v = memoryview(self._block.values(self._i)).cast("d")
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
        layout = self._block.layout
        v, pos = memoryview(self._block.values(self._i)).cast("d"), layout.hists
        for e in layout.engines:
            delay, pos = _hist(e.delay, v, pos)
            queue, pos = _hist(e.queue, v, pos)
            if e.key == key:
                return delay, queue
        return None

    @property
    def snapshot(self) -> Snapshot:
        layout = self._block.layout
        v, pos = memoryview(self._block.values(self._i)).cast("d"), layout.hists
        engines = []
        for e in layout.engines:
            delay, pos = _hist(e.delay, v, pos)
            queue, pos = _hist(e.queue, v, pos)
            engines.append(EngineSignals(e.key[0], e.key[1], {}, lookup_async_delay=delay, queue_time=queue))
        return Snapshot(layout.generation, tuple(engines))


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

"""A target's history: the newest point whole, every older one packed to what derivation reads. Pure.

The history holds `window / poll_interval` points per target (63 at 5 m / 5 s). Whole, a point of the
real vLLM 0.26.0 body costs ~13 KiB (the snapshot's every histogram, the totals' dicts of boxed floats);
an older point is only ever read as a window start or anchor: its time, its totals (`derive.compare`,
`derive.stored_before`) and the two histograms of the convoy view (`convoy.derive`). `push` packs the
point it supersedes to exactly those, with the numbers in flat `array('d')`s behind shared key layouts.
The values read back are the same floats, so every derivation is unchanged (tests/test_history.py).
"""

from __future__ import annotations

from array import array
from collections import deque
from collections.abc import Hashable, Iterator, Mapping
from typing import TypeVar, cast

from kvoffload_exporter.derive import Point, Totals
from kvoffload_exporter.model import EngineSignals, Histogram, Signal, Snapshot

K = TypeVar("K", bound=Hashable)

_LAYOUTS: dict[tuple[Hashable, ...], dict[Hashable, int]] = {}
"""Key order → index, shared by every packed mapping with those keys (one per distinct key set in the
process, not one per point). Bounded: a churning target only starts the table over."""
_MAX_LAYOUTS = 4096
_EMPTY: Mapping[object, float] = {}
_NO_COUNTERS: dict[Signal, float] = {}


class Packed(Mapping[K, float]):
    """A read-only mapping of floats held as one `array('d')` behind a shared key → index layout."""

    __slots__ = ("_index", "_values")

    def __init__(self, source: Mapping[K, float]):
        keys = tuple(source)
        index = _LAYOUTS.get(keys)
        if index is None:
            if len(_LAYOUTS) >= _MAX_LAYOUTS:
                _LAYOUTS.clear()
            index = _LAYOUTS[keys] = {k: i for i, k in enumerate(keys)}
        self._index = cast(dict[K, int], index)
        self._values = array("d", source.values())

    def __getitem__(self, key: K) -> float:
        return self._values[self._index[key]]

    def __iter__(self) -> Iterator[K]:
        return iter(self._index)

    def __len__(self) -> int:
        return len(self._index)


def _pack(m: Mapping[K, float]) -> Mapping[K, float]:
    return cast(Mapping[K, float], _EMPTY) if not m else Packed(m)


def _floats(values: tuple[float, ...]) -> tuple[float, ...]:
    """The same numbers unboxed (8 bytes each instead of 32); read like the tuple (index, zip, len)."""
    return cast(tuple[float, ...], array("d", values)) if values else values


def _hist(h: Histogram | None) -> Histogram | None:
    return None if h is None else Histogram(h.bounds, _floats(h.counts), h.sum, h.count)


def pack_totals(t: Totals) -> Totals:
    """What `derive.compare` and `derive.stored_before` read of a window's start or anchor; the last raw
    values (read only from the newest point, by `derive.advance`) are dropped."""
    return Totals(
        _pack(t.counters),
        _pack(t.by_source),
        t.ttft_bounds,
        _floats(t.ttft_counts),
        store_base=t.store_base,
        evidence=_pack(t.evidence),
        evidence_store_base=_pack(t.evidence_store_base),
    )


def _engine(e: EngineSignals) -> EngineSignals:
    """The engine as the convoy view reads a window's start: its key and two histograms."""
    return EngineSignals(
        e.model_name,
        e.engine,
        _pack(_NO_COUNTERS),  # never read from an older point
        lookup_async_delay=_hist(e.lookup_async_delay),
        queue_time=_hist(e.queue_time),
    )


def pack(p: Point) -> Point:
    """An older point: its time, packed totals and a snapshot of the engines' convoy histograms (its
    families, backends and sources are read from the newest point only)."""
    snap = Snapshot(p.snapshot.generation, tuple(map(_engine, p.snapshot.engines)))
    return Point(p.t, snap, {k: pack_totals(v) for k, v in p.totals.items()})


def push(history: deque[Point], point: Point) -> None:
    """Append the newest point; the one it supersedes (read whole by the next `derive.advance`) is packed."""
    if history:
        history[-1] = pack(history[-1])
    history.append(point)


__all__ = ["Packed", "pack", "pack_totals", "push"]

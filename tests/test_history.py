"""The packed history derives exactly what the whole one does, in a fraction of the memory."""

from __future__ import annotations

from collections import deque
from pathlib import Path

import pytest
from support.bodies import two_engines

from kvoffload_exporter.derive import convoy, history
from kvoffload_exporter.derive import window as derive
from kvoffload_exporter.derive.history import PackedPoint, pack
from kvoffload_exporter.derive.window import Mark, Point
from kvoffload_exporter.ingest.normalise import normalise

CHAIN = sorted((Path(__file__).parent / "fixtures" / "h200-0.6b").glob("A_*.prom"))
RESTART = sorted((Path(__file__).parent / "fixtures" / "h200-0.6b").glob("B_*.prom"))


def _points(paths: list[Path]) -> list[Point]:
    out: list[Point] = []
    for i, path in enumerate(paths):
        out.append(derive.advance(out[-1] if out else None, normalise(path.read_text()), 100.0 + 5.0 * i))
    return out


@pytest.mark.parametrize("window", [10.0, 22.0, 300.0])
def test_packed_history_derives_what_the_whole_history_derives(window: float) -> None:
    # A real chain, then a restart (B starts from zero: counters go down), so resets and anchors are read.
    points = _points(CHAIN + RESTART)
    whole: deque[Mark] = deque(maxlen=8)
    packed: deque[Mark] = deque(maxlen=8)
    compared = 0
    for p in points:
        ref = derive.derive([*whole, p], p.t, window)
        got = derive.derive([*packed, p], p.t, window)
        assert got == ref, f"at t={p.t}"
        whole.append(p)
        history.push(packed, p)
        assert convoy.derive(packed, p.t, window) == convoy.derive(whole, p.t, window)
        compared += len(ref)
    assert (
        compared >= len(points) - 1
    )  # every poll after the first compared at least one engine (one sample: no window)
    assert all(isinstance(x, PackedPoint) for x in list(packed)[:-1]) and isinstance(packed[-1], Point)


def test_the_newest_point_stays_whole_for_the_next_advance() -> None:
    points = _points(CHAIN[:3])
    h: deque[Mark] = deque(maxlen=8)
    for p in points:
        history.push(h, p)
    assert h[-1] is points[-1]
    assert h[-1].totals == points[-1].totals and h[0] is not points[0]


def test_a_packed_point_reads_back_the_numbers_derivation_reads() -> None:
    for p in _points(CHAIN + RESTART):
        q = pack(p)
        assert q.t == p.t and set(q.totals) == set(p.totals) and len(q.totals) == len(p.totals)
        for key, whole in p.totals.items():
            got = q.totals[key]
            for name in ("counters", "by_source", "ttft_bounds", "ttft_counts", "store_base", "evidence"):
                assert getattr(got, name) == getattr(whole, name), name
            assert got.evidence_store_base == whole.evidence_store_base
            assert q.totals.get(("no", "such")) is None
        for e in p.snapshot.engines:
            back = q.snapshot.engine(e.key)
            assert back is not None
            assert (back.queue_time, back.lookup_async_delay) == (e.queue_time, e.lookup_async_delay)
            assert isinstance(q, PackedPoint)  # ... and without a snapshot, as the convoy view reads them
            assert q.convoy_hists(e.key) == (e.lookup_async_delay, e.queue_time)
        assert isinstance(q, PackedPoint) and q.convoy_hists(("no", "such")) is None
        assert q.snapshot.generation == p.snapshot.generation


def test_a_packed_point_costs_a_fraction_of_a_whole_one() -> None:
    points = _points(CHAIN)
    whole = sum(_deep(p) for p in points)
    packed = sum(_deep(pack(p)) for p in points)
    assert packed * 8 < whole, f"packed {packed} B vs whole {whole} B for {len(points)} points"


def _deep(obj: object, seen: set[int] | None = None) -> int:
    """Bytes reachable from `obj` (what a history entry holds)."""
    import sys
    from array import array
    from dataclasses import fields, is_dataclass
    from enum import Enum

    seen = set() if seen is None else seen
    if id(obj) in seen or isinstance(obj, (type, Enum, str)):  # names: shared with the newest point
        return 0
    seen.add(id(obj))
    size = sys.getsizeof(obj)
    if isinstance(obj, dict):
        size += sum(_deep(k, seen) + _deep(v, seen) for k, v in obj.items())
    elif isinstance(obj, (tuple, list, set, frozenset)):
        size += sum(_deep(x, seen) for x in obj)
    elif isinstance(obj, array):
        pass
    elif is_dataclass(obj):
        size += sum(_deep(getattr(obj, f.name), seen) for f in fields(obj))
    elif isinstance(obj, PackedPoint):
        size += _deep(obj._values, seen)  # the layout is shared by every point of that shape
    return size


def test_a_target_keeps_sharing_its_layout_when_the_shared_table_starts_over(monkeypatch: pytest.MonkeyPatch) -> None:
    """Past `_MAX_LAYOUTS` distinct shapes (targets with their own model names) the table starts over on
    every pack; each point would then hold a layout of its own. The point packed before is asked first."""
    monkeypatch.setattr(history, "_MAX_LAYOUTS", 0)  # the table starts over before every insert
    h: deque[Mark] = deque(maxlen=8)
    for p in _points(CHAIN[:6]):
        history.push(h, p)
        history._LAYOUTS.clear()
    layouts = {id(x._layout) for x in list(h)[:-1] if isinstance(x, PackedPoint)}
    assert len(layouts) == 1


def test_a_packed_point_gives_each_engine_its_own_convoy_histograms() -> None:
    """Two engines (data parallel), each with both histograms: each engine's own pair, by its position."""
    text = (Path(__file__).parent / "fixtures" / "reconstructed" / "tiering-0.33" / "after-hit.prom").read_text()
    snap = normalise(two_engines(text))
    q = pack(derive.advance(None, snap, 0.0))
    assert isinstance(q, PackedPoint) and len(snap.engines) == 2
    for e in snap.engines:
        assert e.lookup_async_delay is not None  # (this capture has no queue-time histogram: None, packed so)
        assert q.convoy_hists(e.key) == (e.lookup_async_delay, e.queue_time)
    a, b = snap.engines
    assert a.lookup_async_delay != b.lookup_async_delay

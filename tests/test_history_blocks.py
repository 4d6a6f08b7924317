"""Packed points in blocks: every point reads back exactly the numbers it was packed from, wherever it sits
in its block, whatever the block went through (sealed full or short, decoded, partly fallen off)."""

from __future__ import annotations

import math
import random
import struct
from collections import Counter, deque
from pathlib import Path

import pytest
from support.bodies import two_engines

from kvoffload_exporter.derive import convoy, history
from kvoffload_exporter.derive import window as derive
from kvoffload_exporter.derive.history import BLOCK, PackedPoint
from kvoffload_exporter.derive.window import Mark, Point, Totals
from kvoffload_exporter.ingest.normalise import normalise
from kvoffload_exporter.ingest.snapshot import EngineKey, Signal, Snapshot

FIX = Path(__file__).parent / "fixtures"
CHAIN = sorted((FIX / "h200-0.6b").glob("A_*.prom"))
RESTART = sorted((FIX / "h200-0.6b").glob("B_*.prom"))
NUMBERS = ("counters", "by_source", "ttft_bounds", "ttft_counts", "store_base", "evidence", "evidence_store_base")


def _chain(texts: list[str], t0: float = 100.0) -> list[Point]:
    out: list[Point] = []
    for i, text in enumerate(texts):
        out.append(derive.advance(out[-1] if out else None, normalise(text), t0 + 5.0 * i))
    return out


def _texts(n: int) -> list[str]:
    """`n` bodies: the real chain and its restart, over and over (its shape changes on the way)."""
    base = [p.read_text() for p in CHAIN + RESTART]
    return [base[i % len(base)] for i in range(n)]


def _grown(n: int) -> list[str]:
    """`n` bodies of one shape: the chain's last, every value grown by 1.7 % a poll (still cumulative)."""
    text = CHAIN[-1].read_text()
    out = []
    for i in range(n):
        lines = []
        for line in text.splitlines():
            head, _, value = line.rpartition(" ")
            if line.startswith("#") or not head or value in ("+Inf", "-Inf", "NaN"):
                lines.append(line)
            else:
                lines.append(f"{head} {float(value) * (1 + 0.017 * i)!r}")
        out.append("\n".join(lines) + "\n")
    return out


def _assert_reads_back(packed: Mark, whole: Point) -> None:
    assert isinstance(packed, PackedPoint) and packed.t == whole.t
    assert set(packed.totals) == set(whole.totals)
    for key, tot in whole.totals.items():
        got = packed.totals[key]
        for name in NUMBERS:
            assert getattr(got, name) == getattr(tot, name), (whole.t, key, name)
    for e in whole.snapshot.engines:
        assert packed.convoy_hists(e.key) == (e.lookup_async_delay, e.queue_time)


def _blocks(h: deque[Mark]) -> list[object]:
    seen: dict[int, object] = {}
    for m in h:
        if isinstance(m, PackedPoint):
            seen.setdefault(id(m._block), m._block)
    return list(seen.values())


def test_every_place_in_a_block_reads_back_its_own_numbers() -> None:
    points = _chain(_grown(3 * BLOCK + 3))
    h: deque[Mark] = deque()
    for p in points:
        history.push(h, p)
    blocks = _blocks(h)
    assert len(blocks) == 4 and all(b.data for b in blocks[:3]) and not blocks[3].data  # 3 sealed, 1 filling
    # read in an order the derivation never uses (newest first, then each block's last point first), so a
    # cached decoded point never stands in for another
    for m, p in reversed(list(zip(h, points))[:-1]):
        _assert_reads_back(m, p)
    for b in blocks[:3]:
        b.vals = None  # as sealed: decoded again on the next read
    for m, p in list(zip(h, points))[:-1]:
        _assert_reads_back(m, p)


def test_a_layout_change_mid_block_ends_the_block_short() -> None:
    texts = _grown(16)
    shapes = [0, 0, 0, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0]  # engine "1" comes and goes
    points = _chain([two_engines(t) if s else t for t, s in zip(texts, shapes)])
    h: deque[Mark] = deque()
    for p in points:
        history.push(h, p)
    blocks = _blocks(h)
    sizes = [sum(1 for m in h if isinstance(m, PackedPoint) and m._block is b) for b in blocks]
    assert sizes == [3, 2, BLOCK, 1, 1]  # three short blocks sealed by the next shape, one full
    assert all(b.data for b in blocks[:4])
    for m, p in zip(h, points[:-1]):
        _assert_reads_back(m, p)


@pytest.mark.parametrize("maxlen", [3, BLOCK - 1, BLOCK + 3, 2 * BLOCK + 5])
@pytest.mark.parametrize("window", [10.0, 22.0, 47.0, 300.0])
def test_blocks_falling_off_the_left_end_derive_what_the_whole_history_derives(maxlen: int, window: float) -> None:
    """The window start and anchor (at or before now - window) fall inside sealed blocks, on every place of
    them, while older points of the same block leave the history."""
    points = _chain(_texts(3 * BLOCK) + _grown(2 * BLOCK), t0=0.0)
    whole: deque[Mark] = deque(maxlen=maxlen)
    packed: deque[Mark] = deque(maxlen=maxlen)
    for p in points:
        assert derive.derive([*packed, p], p.t, window) == derive.derive([*whole, p], p.t, window), p.t
        assert convoy.derive(packed, p.t, window) == convoy.derive(whole, p.t, window)
        whole.append(p)
        history.push(packed, p)
    for m, p in zip(packed, list(whole)[:-1]):
        _assert_reads_back(m, p)


def test_the_anchor_inside_a_sealed_block_is_read_back_exactly() -> None:
    """A jittered poll: the anchor is the point before the window start, in the same sealed block or the
    one before; stores before the window (`stored_before`) read its counters."""
    points = _chain(_grown(4 * BLOCK))
    h: deque[Mark] = deque()
    for p in points:
        history.push(h, p)
    end = points[-1]
    for i in range(1, 3 * BLOCK):
        now = points[i].t + 297.5  # start = points[i], anchor = points[i - 1]
        start = derive.window_start([*h, end], now, 300.0)
        assert start is h[i]
        key = next(iter(end.totals))
        anchor = next(p for p in reversed(h) if p.t <= now - 300.0 and key in p.totals)
        assert anchor is h[i - 1]
        _assert_reads_back(anchor, points[i - 1])
        for k in end.totals:
            if k in points[i - 1].totals:
                assert derive.stored_before(anchor, end, k) == derive.stored_before(points[i - 1], end, k)


def _renamed(text: str, i: int) -> str:
    return text.replace("Qwen/Qwen3-0.6B", f"model-{i}")


def test_the_churn_budget_drops_packed_points_and_the_rest_read_back() -> None:
    texts = _texts(3 * BLOCK)
    points = _chain([_renamed(t, i // 3) for i, t in enumerate(texts)])  # a new model name every 3 polls
    h: deque[Mark] = deque(maxlen=4 * BLOCK)
    held: Counter[EngineKey] = Counter()
    dropped = 0
    for p in points:
        dropped += history.push(h, p, held, budget=3)
        assert held == Counter(k for m in h for k in m.totals)
        assert len(held) <= 3
    assert dropped > 0 and len(h) < len(points)
    for m, p in zip(h, points[-len(h) : -1]):
        _assert_reads_back(m, p)


def test_any_doubles_come_back_bit_for_bit() -> None:
    """Values that fall, change sign, jump by orders of magnitude or are not finite: the differences borrow
    across doubles and carry back when decoded; -0.0 stays -0.0 (compared as bytes)."""
    rng = random.Random(7)
    generation = normalise(CHAIN[-1].read_text()).generation
    names = [Signal.PROMPT_TOKENS, Signal.OFFLOAD_STORE_BYTES, Signal.OFFLOAD_LOAD_BYTES]
    specials = [0.0, -0.0, math.inf, -math.inf, 5e-324, -1.0, 1.7976931348623157e308, 2.0**53 + 2]
    points = []
    for i in range(3 * BLOCK + 2):
        values = [rng.choice(specials) if rng.random() < 0.3 else rng.uniform(-1e6, 1e6) * 10 ** rng.randint(-9, 9)
                  for _ in range(5)]  # fmt: skip
        tot = Totals(dict(zip(names, values)), {"local_compute": values[3]}, store_base=values[4])
        points.append(Point(float(i), Snapshot(generation, ()), {("m", "0"): tot}))
    h: deque[Mark] = deque()
    for p in points:
        history.push(h, p)
    assert sum(1 for b in _blocks(h) if b.data) == 3
    for m, p in zip(h, points):
        got, want = m.totals[("m", "0")], p.totals[("m", "0")]
        for a, b in ((got.counters, want.counters), (got.by_source, want.by_source)):
            assert list(a) == list(b) and all(struct.pack("d", a[k]) == struct.pack("d", b[k]) for k in b)
        assert struct.pack("d", got.store_base) == struct.pack("d", want.store_base)

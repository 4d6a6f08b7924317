"""`serve` tunes the cycle collector once: what start-up loaded is frozen, full passes spaced out."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator

import pytest

from kvoffload_exporter.server import gctune


@pytest.fixture
def restored() -> Iterator[None]:
    threshold = gc.get_threshold()
    yield
    gc.unfreeze()
    gc.set_threshold(*threshold)


def test_start_ups_objects_are_never_walked_by_a_full_pass(restored: None) -> None:
    loaded = gctune  # a module object: loaded at start-up, alive for the process
    gctune.tune()
    assert gc.get_freeze_count() > 0
    assert all(o is not loaded for o in gc.get_objects())  # frozen: outside every generation a pass walks


def test_full_passes_wait_for_many_middle_ones(restored: None) -> None:
    _, middle, _ = gc.get_threshold()
    gctune.tune()
    assert gc.get_threshold() == (gctune.YOUNG_PASS_AFTER, middle, gctune.FULL_PASS_EVERY)
    assert gctune.FULL_PASS_EVERY > 10  # CPython's default: a full pass after every 10 middle ones


def _young_passes() -> int:
    return int(gc.get_stats()[0]["collections"])


def _waves(rounds: int) -> None:
    """Poll waves' turnover: 32 polls each make 240 tracked objects, then free what the last wave made."""
    held: list[list[tuple[list[int], dict[str, int]]]] = []
    for _ in range(rounds):
        held.append([([i], {"v": i}) for i in range(32 * 80)])
        if len(held) > 1:
            held.pop(0)


def test_a_poll_waves_turnover_starts_no_young_pass(restored: None) -> None:
    gctune.tune()
    before = _young_passes()
    _waves(50)
    assert _young_passes() == before


def test_the_default_threshold_would_walk_the_turnover(restored: None) -> None:
    gc.set_threshold(700, 10, 10)  # CPython's default: the turnover alone starts young passes
    before = _young_passes()
    _waves(50)
    assert _young_passes() > before + 50


class _Node:
    def __init__(self) -> None:
        self.me = self  # a cycle: refcounting alone never frees it


def test_garbage_cycles_still_start_a_young_pass_that_frees_them(restored: None) -> None:
    gctune.tune()
    before = _young_passes()
    first = weakref.ref(_Node())
    for _ in range(gctune.YOUNG_PASS_AFTER):
        _Node()
    assert _young_passes() > before
    assert first() is None

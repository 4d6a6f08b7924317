"""`serve` tunes the cycle collector once: what start-up loaded is frozen, full passes spaced out."""

from __future__ import annotations

import gc
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


def test_full_passes_wait_for_many_young_ones_and_young_passes_are_untouched(restored: None) -> None:
    young, middle, _ = gc.get_threshold()
    gctune.tune()
    assert gc.get_threshold() == (young, middle, gctune.FULL_PASS_EVERY)
    assert gctune.FULL_PASS_EVERY > 10  # CPython's default: a full pass after every 10 middle ones

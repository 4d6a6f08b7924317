"""The cycle collector tuned for a long-running sidecar: start-up's objects frozen, full passes rarer.

Measured at 1,000 real-body targets (`bench/scale.py`, 5 m window, CPython 3.11 defaults): a full pass ran
every ~23 s, walked ~230,000 objects, held the GIL 150-360 ms (every scrape and poll waiting behind it)
and freed nothing: the exporter's steady state makes no reference cycles. So what start-up loaded
(modules, the catalogue, the config: ~37,000 objects) is frozen, never walked again, and a full pass
waits for `FULL_PASS_EVERY` young-generation passes instead of 10.

A young pass starts when the tracked objects made minus those freed since the last one pass a threshold
(CPython's default: 700). A poll wave holds its polls' new objects (a snapshot, a history point, a view,
a fragment) before it frees the ones they replace, so at 1,000 targets 700 was passed ~3 times a second:
each young pass walked every object the polls since the last one made (~3.5 ms), and every tenth pass the
survivors of ten (~23 ms): ~13 % of the process's CPU (py-spy, native frames), for no garbage. The young
threshold is now `YOUNG_PASS_AFTER`: more than a wave's polls hold at once, so turnover alone starts no
pass and the count grows only with what is never freed, the short cycles a request or an error leaves,
which a young pass still frees (at most ~2 MiB of them wait). `python_gc_collections_total` shows the passes.
"""

from __future__ import annotations

import gc

FULL_PASS_EVERY = 1000
"""Generation-1 passes before a full pass (CPython's default: 10)."""
YOUNG_PASS_AFTER = 20_000
"""Tracked objects made and not freed before a young pass (CPython's default: 700)."""


def tune() -> None:
    """Collect what start-up left, freeze the rest, and space full passes out. Call once, before serving."""
    gc.collect()
    gc.freeze()
    _, middle, _ = gc.get_threshold()
    gc.set_threshold(YOUNG_PASS_AFTER, middle, FULL_PASS_EVERY)


__all__ = ["FULL_PASS_EVERY", "YOUNG_PASS_AFTER", "tune"]

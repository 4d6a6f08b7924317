"""Histograms of a body of a known shape, read by position.

Why: on a real vLLM body 101 of the 162 selected samples are histogram buckets, sums and counts, and
read one by one each costs a turn of `normalise`'s loop and a call. When the line plan says a body has
the last one's shape (the same series on the same lines), each histogram is one `itemgetter` over the
values and three C-level checks. Anything unusual (a pid-split child, a bucket without `le`, a second
`_sum`) stays with the per-sample loop; a negative or decreasing count makes `values` answer None, and
the caller reads the body the long way, which raises the error it always did.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

from kvoffload_exporter.ingest.interning import name_set
from kvoffload_exporter.ingest.lineplan import pick
from kvoffload_exporter.ingest.samples import intern_bounds
from kvoffload_exporter.ingest.snapshot import Histogram

_INF = float("inf")


class Group(NamedTuple):
    key: tuple[str, str]  # the engine the histogram belongs to
    name: str  # its accumulator's name in normalise (a family, or legacy:load / legacy:store)
    bounds: tuple[float, ...]
    counts: Callable[[Sequence[float]], tuple[float, ...]]  # buckets by bound, then +Inf (or _count)
    sum_at: int  # the index of `_sum`
    count_at: int  # the index of `_count`


class Shape(NamedTuple):
    groups: tuple[Group, ...]
    rest: Callable[[Sequence[Any]], tuple[Any, ...]]  # every other sample the loop acts on, in order
    families: frozenset[str]
    pid: bool  # a grouped sample carries `pid` (multiprocess mode)


class Done:
    """A histogram read by position, where normalise keeps its accumulators (`.count`, `.freeze()`)."""

    __slots__ = ("count", "hist")

    def __init__(self, hist: Histogram) -> None:
        self.hist = hist
        self.count = hist.count

    def freeze(self) -> Histogram:
        return self.hist


def compile(
    samples: Sequence[Any],
    name_of: Callable[[str, Any], str | None],
    idle: Callable[[str, str], bool] = lambda fam, sfx: False,
) -> Shape:
    """The shape of `samples` (fam, sfx, (key, rest, pid, le), value): `name_of(fam, rest)` names the
    histogram accumulator a sample feeds, None for samples the loop keeps. A sample the loop would do
    nothing with (`idle(fam, sfx)`) is left out of `rest`, unless it alone names its engine (the loop
    makes an engine of every key it sees)."""
    members: dict[tuple[tuple[str, str], str], list[int]] = defaultdict(list)
    for i, (fam, sfx, (key, rest, _pid, _le), _v) in enumerate(samples):
        name = name_of(fam, rest) if sfx else None
        if name is not None:
            members[(key, name)].append(i)
    groups, grouped = [], set()
    for (key, name), idx in members.items():
        group = _group(key, name, idx, samples)
        if group is not None:
            groups.append(group)
            grouped.update(idx)
    rest = [i for i in range(len(samples)) if i not in grouped]
    quiet = {i for i in rest if idle(samples[i][0], samples[i][1])}
    named = {samples[i][2][0] for i in range(len(samples)) if i not in quiet}
    quiet = {i for i in quiet if samples[i][2][0] in named}
    return Shape(
        tuple(groups),
        pick([i for i in rest if i not in quiet]),
        name_set(frozenset(s[0] for s in samples)),
        any(samples[i][2][2] for i in (*grouped, *quiet)),  # pid: the loop would have said multiprocess
    )


def _group(key: tuple[str, str], name: str, idx: list[int], samples: Sequence[Any]) -> Group | None:
    buckets: dict[float, int] = {}
    total = count = None
    for i in idx:
        _fam, sfx, (_key, _rest, _pid, le), _v = samples[i]
        if sfx == "bucket" and le is not None and le not in buckets:
            buckets[le] = i
        elif sfx == "sum" and total is None:
            total = i
        elif sfx == "count" and count is None:
            count = i
        else:
            return None  # a pid-split child, a bucket without le: the loop sums them
    bounds = sorted(b for b in buckets if b != _INF)
    if not bounds or total is None or count is None:
        return None
    last = buckets.get(_INF, count)
    # the picker is shared (lineplan.pick): every target of one vLLM version has its buckets at the same places
    return Group(key, name, intern_bounds(tuple(bounds)), pick([*(buckets[b] for b in bounds), last]), total, count)


def values(shape: Shape, vals: Sequence[float]) -> list[tuple[tuple[str, str], str, Done]] | None:
    """Each group's histogram from the values of a same-shaped read (finite, as the line plan checks),
    or None when a count is negative or decreases (the long way raises that error)."""
    out = []
    for g in shape.groups:
        counts = g.counts(vals)
        n = vals[g.count_at]
        # non-decreasing (sorted by one C pass over an ordered tuple) and not below 0
        if n < 0.0 or counts != tuple(sorted(counts)) or counts[0] < 0.0:
            return None
        out.append((g.key, g.name, Done(Histogram(g.bounds, counts, vals[g.sum_at], n))))
    return out


__all__ = ["Done", "Group", "Shape", "compile", "values"]

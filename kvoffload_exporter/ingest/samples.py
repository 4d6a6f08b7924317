"""One selected sample of a vLLM body, checked on the way in: labels split (and capped), bucket bounds,
cumulative values that must stay finite, and the histogram accumulator.

Pure helpers of `normalise`, in their own module so that `normalise` keeps one job (families → signals).
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from functools import lru_cache
from typing import Any

from kvoffload_exporter.ingest.exposition import Labels, LimitError, ParseError, parse_float, parse_labels
from kvoffload_exporter.ingest.interning import held
from kvoffload_exporter.ingest.snapshot import Histogram
from kvoffload_exporter.redact import REDACTED

SplitLabels = tuple[tuple[str, str], Labels, bool, float | None]

_SHARED: dict[Any, Any] = {}  # (model_name, engine) pairs and label tuples alike
"""Label parts seen: an engine's (model_name, engine), a sample's other labels. A target repeats them
in most of its label sets and every target of a fleet has the same `le`, `finished_reason` ... sets:
one object each saves ~30 KiB a target (1,000 targets: ~30 MiB). Only parts of cached label texts
(≤ `_CACHED_TEXT` characters) are held, at most `_MAX_SHARED` of them: ~10 MiB at worst."""
_MAX_SHARED = 8192


@lru_cache(maxsize=4096)
def _split(text: str) -> SplitLabels:
    """Label text → ((model_name, engine), remaining labels without pid, had_pid, `le` as a float).

    Ray Serve's re-export (`ray_vllm_*`) adds `ReplicaId` and `WorkerId`: one node's body holds every
    replica on it, so the replica is part of the engine (`<ReplicaId>/<engine>`), and the worker process
    serving it is not (a restarted worker is the same engine). Cached by the label text itself: a target
    repeats the same label sets every poll."""
    model = engine = replica = ""
    rest = []
    pid = False
    le = None
    for k, v in parse_labels(text):
        if k == "model_name":
            model = v
        elif k == "engine":
            engine = v
        elif k == "pid":
            pid = True
        elif k == "ReplicaId":
            replica = v
        elif k == "WorkerId":
            continue
        else:
            if k == "le":
                le = _bound(v)
            rest.append((k, v))
    if replica:
        engine = f"{replica}/{engine}"
    if len(text) > _CACHED_TEXT:
        return (model, engine), tuple(rest), pid, le
    return held(_SHARED, (model, engine), _MAX_SHARED), held(_SHARED, tuple(rest), _MAX_SHARED), pid, le


_INF = float("inf")


def _bound(v: str) -> float:
    """A bucket bound of a size or duration histogram: +Inf or a finite number >= 0."""
    if v in ("+Inf", "Inf", "inf", "+inf"):
        return _INF
    b = parse_float(v, "histogram bound le")
    if not b >= 0.0:  # NaN and -Inf included
        raise ParseError(f"impossible histogram bound le={v!r} for a size or duration")
    return b


def finite(v: float, what: str) -> float:
    """A cumulative value must be finite and >= 0: read() already refuses NaN/Inf in the body, so
    this catches a negative counter and a sum of children that overflowed (two pid children of
    1e308 are +Inf), either of which would poison the reset-adjusted totals for the exporter's
    lifetime. The poll fails with reason `parse` instead."""
    if not 0.0 <= v < _INF:
        raise ParseError(f"{'negative' if -_INF < v < 0 else 'non-finite'} cumulative value {v} in {what}")
    return v


_BOUNDS: dict[tuple[float, ...], tuple[float, ...]] = {}
"""Bucket layouts seen (a handful per vLLM version): every histogram of one layout shares one tuple."""
_MAX_BOUNDS = 1024


def intern_bounds(bounds: tuple[float, ...]) -> tuple[float, ...]:
    """One tuple per distinct bucket layout."""
    return held(_BOUNDS, bounds, _MAX_BOUNDS)


class Hist:
    __slots__ = ("buckets", "count", "sum")

    def __init__(self) -> None:
        self.buckets: dict[float, float] = {}
        self.sum = 0.0
        self.count = 0.0

    def add(self, sfx: str, value: float, le: float | None) -> None:
        # finite() is called only to raise: the in-line range checks are the same test, cheaper.
        if sfx == "bucket":
            if le is None:
                return
            if not 0.0 <= value < _INF:
                finite(value, "histogram bucket")
            total = self.buckets.get(le, 0.0) + value
            self.buckets[le] = total if total < _INF else finite(total, "bucket sum")
        elif sfx == "sum":
            self.sum += value
            if self.sum - self.sum != 0.0:
                raise ParseError(f"non-finite histogram sum {self.sum}")
        elif sfx == "count":
            if not 0.0 <= value < _INF:
                finite(value, "histogram count")
            total = self.count + value
            self.count = total if total < _INF else finite(total, "histogram count")

    def freeze(self) -> Histogram:
        buckets = self.buckets
        bounds = sorted(buckets)  # bounds are never NaN (_bound), so +Inf can only be last
        if bounds and bounds[-1] == _INF:
            bounds.pop()
        finite = intern_bounds(tuple(bounds))
        counts = (*map(buckets.__getitem__, finite), buckets.get(_INF, self.count))
        if any(map(operator.gt, counts, counts[1:])):
            raise ParseError("histogram buckets are not cumulative (a count decreases as le grows)")
        return Histogram(finite, counts, self.sum, self.count)


_CACHED_TEXT = 1024
"""Label texts up to this length are cached by `_split`; longer ones are split each time."""


def _across_values(text: str, scrub: Callable[[str], str]) -> str:
    """`text` with every value that holds part of a secret split over adjacent label values
    (`model_name="sk-abc",engine="def123"`) replaced by `<redacted>`: the values are joined and searched
    once; only when that finds something are the shortest runs of values that hold it looked for."""
    pairs = parse_labels(text)
    if len(pairs) < 2:
        return text
    values = [v for _, v in pairs]
    joined = "".join(values)
    if scrub(joined) == joined:
        return text
    hidden: set[int] = set()
    for i in range(len(values) - 1):
        for j in range(i + 2, len(values) + 1):  # runs of two values or more: one alone was searched already
            run = "".join(values[i:j])
            if scrub(run) != run:
                rest = "".join(values[i + 1 : j])
                if scrub(rest) == rest:  # the run needs values[i]: the secret starts in it
                    hidden.update(range(i, j))
                break
    return ",".join(f'{k}="{REDACTED if n in hidden else _escape(v)}"' for n, (k, v) in enumerate(pairs))


def _escape(v: str) -> str:
    return v.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def labels_reader(max_len: int, scrub: Callable[[str], str] | None = None) -> Callable[[str], SplitLabels]:
    """`_split`, refusing any label value longer than `max_len` (a 3.5 MB `model_name` would be
    copied into every derived series). Only label texts longer than the cap need the check.
    `scrub` (the target's redact.Scrubber) removes the credentials sent to the target from the label
    text before it is split and kept: every label value of a snapshot has been through it."""

    def labels_of(text: str) -> SplitLabels:
        if len(text) > max_len:  # only then can a value be over the cap
            for k, v in parse_labels(text):
                if len(v) > max_len:
                    raise LimitError("label_limit", f"label {k} is {len(v)} characters long (limit {max_len})")
        if scrub is not None:
            text = _across_values(scrub(text), scrub)
        # Long label texts are not cached: 4096 of them could otherwise pin ~130 MiB.
        return _split(text) if len(text) <= _CACHED_TEXT else _split.__wrapped__(text)

    return labels_of

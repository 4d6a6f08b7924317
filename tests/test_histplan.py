"""Histograms read by position (histplan) read as the per-sample loop reads them: the same snapshot for
a planned body, the same error for a negative or decreasing count, and pid-split children left to the
loop, which sums them."""

from __future__ import annotations

import re

import pytest
from test_line_cache import _outcome_default as _outcome
from test_lineplan import LINES, TEXT, _swap

from kvoffload_exporter.ingest.linecache import LineCache
from kvoffload_exporter.ingest.normalise import normalise

_VALUE = re.compile(r"^(vllm:\S+(?:\{[^}]*\})?) (\S+)$", re.M)
TTFT = "vllm:time_to_first_token_seconds"


def _advance(text: str, k: int) -> str:
    """Every value of `text` plus k: cumulative histograms stay cumulative, the shape stays."""
    return _VALUE.sub(lambda m: f"{m.group(1)} {float(m.group(2)) + k!r}", text)


def _planned(text: str) -> LineCache:
    cache = LineCache()
    normalise(text, None, cache)
    return cache


def _line(prefix: str) -> int:
    return next(i for i, line in enumerate(LINES) if line.startswith(prefix))


def test_a_planned_body_reads_its_histograms_by_position_as_the_loop_does() -> None:
    cache = _planned(TEXT)
    for k in (1, 2, 3):
        body = _advance(TEXT, k)
        assert _outcome(body, cache) == _outcome(body, None)
    shape = cache.last.shape  # type: ignore[attr-defined]
    assert shape is not None
    names = {g.name for g in shape.groups}
    assert {TTFT, "vllm:kv_offload_load_size", "legacy:load", "legacy:store"} <= names, names


def test_targets_of_one_version_share_their_shapes_but_the_engine_of_each_histogram() -> None:
    """Two targets serving other models: each histogram's picker and the families (the shape's and the
    snapshot's) are one object for both (~5 KiB a target held twice before); only the engine each histogram
    belongs to is a target's own."""
    other = TEXT.replace("Qwen/Qwen3-0.6B", "other/model")
    a, b = _planned(TEXT), _planned(other)
    snap_a, snap_b = normalise(_advance(TEXT, 1), None, a), normalise(_advance(other, 1), None, b)
    sa, sb = a.last.shape, b.last.shape  # type: ignore[attr-defined]
    assert sa is not None and sb is not None and len(sa.groups) == len(sb.groups) > 5
    assert sa.families is sb.families and snap_a.families is snap_b.families
    for ga, gb in zip(sa.groups, sb.groups):
        assert ga.counts is gb.counts and ga.bounds is gb.bounds, ga.name
    assert {g.key[0] for g in sb.groups} == {"other/model"}


def _set(prefix: str, value: str, k: int = 1) -> str:
    i = _line(prefix)
    lines = _advance(TEXT, k).split("\n")
    lines[i] = f"{lines[i].rpartition(' ')[0]} {value}"
    return "\n".join(lines)


HOSTILE = {
    "a negative bucket": lambda: _set(f'{TTFT}_bucket{{engine="0",le="0.001"', "-1.0"),
    "a bucket above the next one": lambda: _set(f'{TTFT}_bucket{{engine="0",le="0.02"', "1e12"),
    "a negative count": lambda: _set(f"{TTFT}_count", "-3.0"),
    "a +Inf bucket below the last bound": lambda: _set(f'{TTFT}_bucket{{engine="0",le="+Inf"', "0.0"),
}


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_a_bad_histogram_in_a_planned_body_fails_as_the_loop_fails_it(case: str) -> None:
    body = HOSTILE[case]()
    got = _outcome(body, _planned(TEXT))
    assert got == _outcome(body, None)
    assert isinstance(got, tuple), got  # (reason, message): the error, not a snapshot


def test_pid_split_histogram_children_stay_with_the_loop_which_sums_them() -> None:
    i = _line(f"{TTFT}_bucket")
    j = _line(f"{TTFT}_count")
    split = [line.replace("{", '{pid="7",', 1) for line in LINES[i : j + 1]]
    text = _swap(i, "\n".join([LINES[i], *split[1:], split[0]]))  # the pid child's lines, after the first
    cache = _planned(text)
    body = _advance(text, 1)
    assert _outcome(body, cache) == _outcome(body, None)
    shape = cache.last.shape  # type: ignore[attr-defined]
    assert TTFT not in {g.name for g in shape.groups}


def test_a_same_shaped_body_of_other_histogram_bodies_is_not_read_by_a_stale_shape() -> None:
    """A long read in between (another shape) drops the shape: the next planned body compiles its own."""
    cache = _planned(TEXT)
    normalise(_advance(TEXT, 1), None, cache)
    other = TEXT.replace('engine="0"', 'engine="5"')
    assert _outcome(other, cache) == _outcome(other, None)
    assert _outcome(_advance(other, 1), cache) == _outcome(_advance(other, 1), None)


PREFILL = "vllm:request_prefill_time_seconds"


def test_idle_prefill_buckets_are_stepped_over_unless_they_alone_name_an_engine() -> None:
    """Only a prefill histogram's `_sum` is a signal: its buckets are left out of the loop, but an engine
    that sends nothing else is still an engine, as the loop makes it."""
    i = _line(f"{PREFILL}_bucket")
    lone = [LINES[k].replace('engine="0"', 'engine="9"') for k in range(i, i + 5)]
    text = _swap(i, "\n".join([LINES[i], *lone]))
    cache = _planned(text)
    body = _advance(text, 1)
    got = _outcome(body, cache)
    assert got == _outcome(body, None)
    assert "9" in {e.engine for e in got.engines}  # type: ignore[union-attr]
    shape = cache.last.shape  # type: ignore[attr-defined]
    rest = shape.rest(range(1000))  # the positions of the samples the loop reads
    assert len(rest) < 30, len(rest)  # engine 0's prefill buckets are not among the loop's samples


def test_an_idle_sample_with_pid_still_says_multiprocess() -> None:
    i = _line(f"{PREFILL}_bucket")
    text = _swap(i, LINES[i].replace("{", '{pid="7",', 1))
    cache = _planned(text)
    body = _advance(text, 1)
    got = _outcome(body, cache)
    assert got == _outcome(body, None)
    assert got.multiprocess  # type: ignore[union-attr]

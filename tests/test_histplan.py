"""Histograms read by position (histplan) read as the per-sample loop reads them: the same snapshot for
a planned body, the same error for a negative or decreasing count, and pid-split children left to the
loop, which sums them."""

from __future__ import annotations

import re

import pytest
from test_line_cache import _outcome_default as _outcome
from test_lineplan import LINES, TEXT, _swap

from kvoffload_exporter.exposition import LineCache
from kvoffload_exporter.normalise import normalise

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

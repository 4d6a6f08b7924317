"""`Exposition.series` writes exactly what `add` per series writes, poll after poll, while it reuses lines."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvoffload_exporter.expose.render import Exposition, Heads

LB = {"target": "t", "model_name": 'm"1\\', "engine": "0"}
NAMES = ("kvoffload_prompt_tokens_total", "kvoffload_tier_bytes", "kvoffload_gpu_kv_cache_blocks")
VALUE = st.one_of(
    st.none(),
    st.sampled_from([0.0, -0.0, 1.0, 5, math.nan, math.inf, -math.inf, 1e15, 1e16, 0.1]),
    st.floats(allow_nan=True, allow_infinity=True),
    st.integers(min_value=-(10**20), max_value=10**20),
)


def _by_add(values: tuple[float | None, ...]) -> dict[str, str]:
    x = Exposition({})  # a fresh cache: every line formatted from scratch
    for name, v in zip(NAMES, values):
        x.add(name, v, LB)
    return x.fragment()


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(VALUE, VALUE, VALUE), min_size=1, max_size=6))
def test_series_writes_what_add_writes_on_every_poll(polls: list[tuple[float | None, ...]]) -> None:
    heads: Heads = {}
    for values in polls:  # one target's polls: the lines of the last poll are reused where they hold
        x = Exposition(heads)
        x.series(("engine", "t", "m", "0"), values, lambda: [(n, n, LB) for n in NAMES])
        assert x.fragment() == _by_add(values)


def test_a_series_that_gets_a_value_again_is_written_from_its_labels() -> None:
    heads: Heads = {}
    for values in ((1.0, None, 2.0), (1.0, 3.0, 2.0), (None, 3.5, 2.0), (7.0, 3.5, 2.0)):
        x = Exposition(heads)
        x.series(("k",), values, lambda: [(n, n, LB) for n in NAMES])
        assert x.fragment() == _by_add(values)


def test_labels_other_than_the_catalogues_are_refused() -> None:
    x = Exposition({})
    with pytest.raises(ValueError, match="labels"):
        x.series(("k",), (1.0,), lambda: [(NAMES[0], NAMES[0], {"target": "t"})])


def test_as_many_values_as_series_or_refused() -> None:
    x = Exposition({})
    with pytest.raises(ValueError, match="2 values for 1 series"):
        x.series(("k",), (1.0, 2.0), lambda: [(NAMES[0], NAMES[0], LB)])


def test_summary_lines_skip_what_is_not_finite_and_follow_their_values() -> None:
    heads: Heads = {}
    wl = {**LB, "window": "5m"}
    name = "kvoffload_ttft_seconds"
    expected = []
    for q, total, count in (({0.5: 0.1, 0.99: math.nan}, None, 3.0), ({0.5: 0.2, 0.99: 0.4}, 1.5, 4.0)):
        x = Exposition(heads)
        x.add_summary(name, wl, q, count, total)
        expected.append(x.fragment()[name])
    head = 'target="t",model_name="m\\"1\\\\",engine="0",window="5m"'
    assert expected == [
        f'{name}{{{head},quantile="0.5"}} 0.1\n{name}_count{{{head}}} 3.0\n',
        f'{name}{{{head},quantile="0.5"}} 0.2\n{name}{{{head},quantile="0.99"}} 0.4\n'
        f"{name}_sum{{{head}}} 1.5\n{name}_count{{{head}}} 4.0\n",
    ]

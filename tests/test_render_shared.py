"""What targets share (a fragment's families, a record's families and counts) and what a record keeps once
(a family's lines joined, no line held twice) never lets one target's text show in another's."""

from __future__ import annotations

import math

from hypothesis import given, settings
from hypothesis import strategies as st

from kvoffload_exporter.expose.mergeplan import Frag
from kvoffload_exporter.expose.render import Exposition, Heads, merge

NAME = "kvoffload_ttft_seconds"
QS = (0.5, 0.9, 0.99)


def _labels(target: str) -> dict[str, str]:
    return {"target": target, "model_name": f"m-{target}", "engine": "0", "window": "5m"}


def _poll(heads: Heads, target: str, q: tuple[float, ...], count: float, total: float | None) -> Frag:
    x = Exposition(heads)
    x.add_summary(NAME, _labels(target), dict(zip(QS, q)), count, total)
    x.series(
        ("by_source", target),
        (count, total),
        lambda: [
            ("kvoffload_prompt_tokens_by_source_total", "kvoffload_prompt_tokens_by_source_total", {**lb, "source": s})
            for lb, s in (({k: v for k, v in _labels(target).items() if k != "window"}, s) for s in ("a", "b"))
        ],
    )
    x.add("kvoffload_up", 1.0, {"target": target})
    return x.fragment()


def _fresh(target: str, q: tuple[float, ...], count: float, total: float | None) -> Frag:
    return _poll({}, target, q, count, total)  # nothing reused: every line written from its labels


def test_two_targets_one_changing_leaves_the_others_text_as_it_was() -> None:
    a, b = {}, {}  # type: ignore[var-annotated]
    fa = _poll(a, "a", (0.1, 0.2, 0.3), 10.0, 1.5)
    fb = _poll(b, "b", (0.1, 0.2, 0.3), 10.0, 1.5)
    before_b = dict(fb)
    assert fa.shape is fb.shape  # one tuple of families for both
    assert a[("\1", NAME, *_labels("a").values(), *QS)][0] is b[("\1", NAME, *_labels("b").values(), *QS)][0]
    fa2 = _poll(a, "a", (0.4, 0.2, 0.35), 11.0, 2.5)
    fb2 = _poll(b, "b", (0.1, 0.2, 0.3), 10.0, 1.5)
    assert dict(fb2) == before_b == dict(_fresh("b", (0.1, 0.2, 0.3), 10.0, 1.5))
    assert dict(fa2) == dict(_fresh("a", (0.4, 0.2, 0.35), 11.0, 2.5))
    assert 'target="b"' not in merge([fa2]) and 'target="a"' not in merge([fb2])


def test_a_family_of_several_series_is_held_once_as_the_fragment_holds_it() -> None:
    heads: Heads = {}
    for n in range(3):
        frag = _poll(heads, "a", (0.1 * n, 0.2, 0.3), 10.0 + n, 1.5)
        rec = heads[("\1", NAME, *_labels("a").values(), *QS)]
        assert rec[-1] == (frag[NAME],) and rec[-1][0] is frag[NAME]  # the same object, not a copy


VALUE = st.one_of(st.none(), st.sampled_from([0.0, -0.0, 1.0, 1e16, math.nan, math.inf]), st.floats())


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.tuples(VALUE, VALUE, VALUE), VALUE, VALUE), min_size=1, max_size=6))
def test_a_several_series_family_follows_its_values_poll_after_poll(polls: list) -> None:  # type: ignore[type-arg]
    heads: Heads = {}
    other: Heads = {}
    for q, count, total in polls:
        got = _poll(heads, "a", q, count if count is not None else 0.0, total)
        steady = _poll(other, "b", (1.0, 2.0, 3.0), 4.0, 5.0)  # the other target never changes
        assert dict(got) == dict(_fresh("a", q, count if count is not None else 0.0, total))
        assert dict(steady) == dict(_fresh("b", (1.0, 2.0, 3.0), 4.0, 5.0))


def test_a_frag_reads_as_the_mapping_it_stands_for() -> None:
    frag = _fresh("a", (0.1, 0.2, 0.3), 10.0, 1.5)
    assert list(frag) == list(frag.shape) and len(frag) == len(frag.texts)
    assert frag == dict(zip(frag.shape, frag.texts))
    assert merge([frag]) == merge([dict(frag)])
    assert "missing" not in frag

"""`render.merge` by plans of shape runs gives, byte for byte, what grouping every fragment's families one
by one gives: catalogue order, one header per family, each family's texts in the order of the fragments."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from kvoffload_exporter.expose.mergeplan import Merger
from kvoffload_exporter.expose.render import _HEADERS, _ORDER, merge

FAMILIES = [*_ORDER[:6], "not_in_the_catalogue"]


def reference(fragments: list[dict[str, str]], openmetrics: bool = False, foreign: str = "") -> str:
    """The merge as first written: one append per family of every fragment."""
    by_family: dict[str, list[str]] = {}
    for frag in fragments:
        for name, text in frag.items():
            by_family.setdefault(name, []).append(text)
    out = []
    for name in _ORDER:
        if name in by_family:
            out.append(_HEADERS[openmetrics][name])
            out.extend(by_family[name])
    out.append(foreign)
    if openmetrics:
        out.append("# EOF\n")
    return "".join(out)


fragment = st.lists(st.sampled_from(FAMILIES), unique=True, max_size=5).map(
    lambda names: {n: f'{n}{{i="{i}"}} 1.0\n' for i, n in enumerate(names)}
)


@settings(max_examples=300, deadline=None)
@given(st.lists(fragment, max_size=8), st.booleans(), st.sampled_from(["", "foreign_total 1.0\n"]))
def test_merge_equals_one_append_per_family(frags: list[dict[str, str]], om: bool, foreign: str) -> None:
    # distinct texts per fragment, so a piece taken from the wrong fragment or in the wrong order shows
    frags = [{n: t.replace("1.0", f"{j}.0") for n, t in f.items()} for j, f in enumerate(frags)]
    assert merge(frags, om, foreign) == reference(frags, om, foreign)


def test_runs_of_one_shape_keep_the_fragments_order_across_runs() -> None:
    a, b = _ORDER[0], _ORDER[1]
    frags = [{a: "a1\n", b: "b1\n"}, {a: "a2\n", b: "b2\n"}, {b: "b3\n"}, {a: "a4\n", b: "b4\n"}, {}]
    got = merge(frags)
    assert got == reference(frags)
    assert got.index("b1") < got.index("b2") < got.index("b3") < got.index("b4")


def test_a_family_outside_the_catalogue_is_never_written() -> None:
    assert merge([{"not_in_the_catalogue": "x 1.0\n"}]) == ""


def test_plans_are_bounded() -> None:
    m = Merger(_ORDER, _HEADERS, limit=2)
    for i in range(5):
        m([{_ORDER[j]: "x 1.0\n" for j in range(i + 1)}], False, ())
        assert len(m._plans) <= 2

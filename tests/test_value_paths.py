"""Fast paths that must give exactly what the plain code gave: a value's text, a window delta's clamp at 0,
an engine's signal values. Each is held against the plain definition, written out here as the spec."""

from __future__ import annotations

import math

from hypothesis import example, given
from hypothesis import strategies as st

from kvoffload_exporter.derive import window as derive
from kvoffload_exporter.enums import GAUGE_SIGNALS, Signal
from kvoffload_exporter.expose.render import format_value
from kvoffload_exporter.ingest.snapshot import EngineSignals

FLOATS = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True),
    st.integers(-(10**17), 10**17).map(float),
    st.sampled_from([0.0, -0.0, 184.0, 1e15, 1e16, 999999999999999.0, 0.1, 1.7959436780397747e09]),
)


def _spec_text(v: float) -> str:
    """Prometheus text as the exporter has always written it: whole numbers below 1e15 as `N.0`."""
    if math.isnan(v):
        return "NaN"
    if math.isinf(v):
        return "+Inf" if v > 0 else "-Inf"
    if v == int(v) and abs(v) < 1e15:
        return f"{int(v)}.0"
    return repr(float(v))


@given(FLOATS)
@example(-0.0)
@example(123456789012345.0)
def test_a_value_is_written_as_it_always_was(v: float) -> None:
    assert format_value(v) == _spec_text(v)


def test_an_integer_value_is_written_as_a_float() -> None:
    assert (format_value(5), format_value(0), format_value(True)) == ("5.0", "0.0", "1.0")


def _same(a: float, b: float) -> bool:
    return (math.isnan(a) and math.isnan(b)) or (a == b and math.copysign(1.0, a) == math.copysign(1.0, b))


@given(st.dictionaries(st.integers(0, 20), FLOATS, max_size=8), st.dictionaries(st.integers(0, 20), FLOATS, max_size=8))
@example({1: -0.0, 2: math.nan, 3: 5.0, 4: 1.0, 5: math.inf}, {1: 0.0, 2: 1.0, 3: 1.0, 4: 2.0, 5: math.inf})
def test_window_deltas_clamp_at_zero_as_max_does(a: dict[int, float], b: dict[int, float]) -> None:
    got, new = derive._diff(a, b), derive._diff(a, b, new_from_zero=True)
    assert list(got) == [k for k in a if k in b] and list(new) == list(a)
    assert all(_same(got[k], max(0.0, a[k] - b[k])) for k in got)
    assert all(_same(new[k], max(0.0, a[k] - b.get(k, 0.0))) for k in new)


@given(st.dictionaries(st.sampled_from(list(Signal)), FLOATS), st.lists(FLOATS, min_size=4, max_size=4))
def test_an_engines_values_are_its_value_of_each_signal(counters: dict[Signal, float], gauges: list[float]) -> None:
    fields = {s.value: v for s, v in zip(GAUGE_SIGNALS, gauges, strict=True)}
    e = EngineSignals("m", "0", counters, **fields)  # type: ignore[arg-type]
    signals = (*Signal, *reversed(tuple(Signal)))
    got = e.values(signals)
    assert len(got) == len(signals)
    assert all(x is e.value(s) or _same(x, e.value(s)) for x, s in zip(got, signals, strict=True))  # type: ignore[arg-type]

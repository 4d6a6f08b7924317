"""The typed catalogue and closed sets: rows keyword-only, signals exported once, O(1) engine lookup."""

from __future__ import annotations

from pathlib import Path

import pytest

from kvoffload_exporter.catalogue import CATALOGUE, SIGNAL_METRICS, Metric
from kvoffload_exporter.derive.window import interval
from kvoffload_exporter.enums import COUNTER_SIGNALS, GAUGE_SIGNALS, Group, MetricType, Signal, State, Unit
from kvoffload_exporter.expose.collector import TargetView, collect
from kvoffload_exporter.ingest.normalise import normalise
from kvoffload_exporter.ingest.snapshot import EngineSignals, Generation, Snapshot

FIXTURES = Path(__file__).parent / "fixtures"
CHAIN = sorted((FIXTURES / "h200-0.6b").glob("A_*.prom"))


def test_rows_are_keyword_only() -> None:
    with pytest.raises(TypeError):
        Metric("kvoffload_x", MetricType.GAUGE, "Positional rows can swap unit and source.")  # type: ignore[call-arg]


def test_rows_carry_enum_members_not_strings() -> None:
    for m in CATALOGUE.values():
        assert type(m.type) is MetricType and type(m.unit) is Unit and type(m.group) is Group, m.name
        assert m.signal is None or type(m.signal) is Signal, m.name


def test_every_signal_is_exported_by_exactly_one_row_of_matching_type() -> None:
    signals = [s for s, _ in SIGNAL_METRICS]
    assert sorted(signals) == sorted(Signal)
    for s, m in SIGNAL_METRICS:
        assert m.type == (MetricType.COUNTER if s in COUNTER_SIGNALS else MetricType.GAUGE), m.name
    assert set(COUNTER_SIGNALS) | set(GAUGE_SIGNALS) == set(Signal)


def test_normalise_keys_counters_by_signal_and_types_the_generation() -> None:
    snap = normalise(CHAIN[-1].read_text())
    assert type(snap.generation) is Generation
    for e in snap.engines:
        assert e.counters and all(type(k) is Signal for k in e.counters)
    for d in interval(normalise(CHAIN[0].read_text()), snap).values():
        assert type(d.state) is State and all(type(k) is Signal for k in d.deltas)


def test_collector_writes_every_signal_row_the_engine_has() -> None:
    snap = normalise(CHAIN[-1].read_text())
    text = collect([TargetView(label="t", url="http://x", up=True, snapshot=snap)], "1m")
    (e,) = snap.engines
    for s, m in SIGNAL_METRICS:
        v = e.value(s)
        head = f'{m.name}{{target="t",model_name="{e.model_name}",engine="{e.engine}"}}'
        assert (head in text) == (v is not None), m.name


def _engine(model: str, engine: str, hits: float) -> EngineSignals:
    return EngineSignals(model_name=model, engine=engine, counters={Signal.GPU_PREFIX_HITS: hits})


def test_engine_lookup_by_key_first_wins_and_missing_is_none() -> None:
    engines = (*(_engine(f"m{i % 7}", str(i), float(i)) for i in range(50)), _engine("m0", "0", -1.0))
    snap = Snapshot(generation=Generation.NONE, engines=engines)
    for e in engines[:-1]:
        assert snap.engine(e.key) is e  # the duplicate key at the end does not shadow the first
    assert snap.engine(("m0", "missing")) is None
    assert snap == Snapshot(generation=Generation.NONE, engines=engines)  # the index is not compared

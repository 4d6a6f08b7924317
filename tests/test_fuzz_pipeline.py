"""Property tests over parser → normaliser → derivation → renderer (hypothesis, bounded for CI).

Whatever a target sends: the only exception is the closed ParseError (reason `parse` or a cap),
and the exposition the exporter then writes is parseable by prometheus_client with no NaN, no ±Inf
and no negative counter.
"""

from __future__ import annotations

import math

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kvoffload_exporter.config.limits import Limits
from kvoffload_exporter.derive import window as derive
from kvoffload_exporter.enums import ScrapeErrorReason
from kvoffload_exporter.expose.collector import TargetView, collect
from kvoffload_exporter.ingest.exposition import ParseError
from kvoffload_exporter.ingest.normalise import FAMILIES, HISTOGRAMS, normalise
from tests.support.prom import families

FUZZ = settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
LIMITS = Limits(sample_limit=200, label_value_length_limit=64, engine_limit=8)

VALUES = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
    st.integers(-10, 10**6).map(str),
    st.sampled_from(["NaN", "+Inf", "-Inf", "1e308", "-0", "1_000", "١", "0x1p3", "", "1e999", ".5", "5."]),
)
LABEL_VALUES = st.one_of(
    st.sampled_from(["0", "1", "m", "CPU_to_GPU", "GPU_to_CPU", "local_cache_hit", "+Inf", "0.1", "NaN", "-1"]),
    st.text(min_size=0, max_size=80),
)
LABEL_NAMES = st.sampled_from(["model_name", "engine", "pid", "le", "transfer_type", "source", "num_gpu_blocks", "x"])


def _escape(v: str) -> str:
    return v.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


@st.composite
def sample_line(draw: st.DrawFn) -> str:
    fam = draw(st.sampled_from(FAMILIES))
    if draw(st.booleans()):
        fam = "vllm_" + fam[5:]
    if fam.replace("vllm_", "vllm:") in HISTOGRAMS:
        fam += "_" + draw(st.sampled_from(["bucket", "sum", "count"]))
    elif draw(st.booleans()):
        fam += "_total"
    labels = draw(st.dictionaries(LABEL_NAMES, LABEL_VALUES, max_size=5))
    text = ",".join(f'{k}="{_escape(v)}"' for k, v in labels.items())
    line = f"{fam}{{{text}}} {draw(VALUES)}" if labels or draw(st.booleans()) else f"{fam} {draw(VALUES)}"
    if draw(st.integers(0, 9)) == 0:
        line += ' # {trace_id="abc"} 1.0'
    return line


LINES = st.one_of(
    sample_line(),
    sample_line(),
    sample_line(),
    st.sampled_from(["# TYPE vllm:kv_offload_load_bytes counter", "# HELP x y", "", "garbage {", "vllm:{"]),
    st.text(max_size=40),
)
BODIES = st.lists(LINES, max_size=40).map(lambda ls: "\n".join(ls) + "\n")
REASONS = {r.value for r in ScrapeErrorReason}


def _check_output(text: str) -> None:
    for fam in families(text):
        for s in fam.samples:
            assert math.isfinite(s.value), s
            if fam.type == "counter":
                assert s.value >= 0, s


def _pipeline(bodies: list[str]) -> None:
    history: list[derive.Point] = []
    view = TargetView(label="t", url="http://t")
    for i, body in enumerate(bodies):
        try:
            snap = normalise(body, LIMITS)
        except ParseError as e:
            assert e.reason in REASONS
            continue
        point = derive.advance(history[-1] if history else None, snap, 10.0 * i)
        derived = derive.derive([*history, point], 10.0 * i, 30.0)
        history.append(point)
        view = TargetView(label="t", url="http://t", up=True, snapshot=snap, derived=derived)
        _check_output(collect([view], "30s"))
    _check_output(collect([view], "30s"))


@FUZZ
@given(BODIES)
def test_any_body_parses_or_fails_closed_and_renders_clean(body: str) -> None:
    _pipeline([body])


@FUZZ
@given(st.lists(BODIES, min_size=2, max_size=4))
def test_any_sequence_of_bodies_renders_clean(bodies: list[str]) -> None:
    _pipeline(bodies)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.floats(0, 1e308), st.floats(0, 1e308), st.floats(0, 1e6)), min_size=2, max_size=6))
def test_counter_sequences_with_resets_and_huge_values_render_clean(seq: list[tuple[float, float, float]]) -> None:
    lb = 'engine="0",model_name="m"'
    bodies = [
        f"vllm:kv_offload_load_bytes_total{{{lb}}} {a!r}\nvllm:kv_offload_store_bytes_total{{{lb}}} {b!r}\n"
        f"vllm:kv_offload_load_time_total{{{lb}}} {c!r}\nvllm:prefix_cache_hits_total{{{lb}}} {c!r}\n"
        for a, b, c in seq
    ]
    _pipeline(bodies)

"""Values a target sends are checked at parse time: what cannot be a counter, a bound or a float in
Prometheus's syntax fails the poll (reason `parse`); the exporter never emits NaN, ±Inf or a negative counter."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from kvoffload_exporter.derive import window as derive
from kvoffload_exporter.expose.collector import TargetView, collect
from kvoffload_exporter.ingest.exposition import ParseError
from kvoffload_exporter.ingest.normalise import normalise
from tests.support.prom import families

LB = 'engine="0",model_name="m"'


def _body(*lines: str) -> str:
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize("value", ["1_000", "١٢", "1e999"])
def test_python_only_float_syntax_is_a_parse_error(value: str) -> None:
    with pytest.raises(ParseError, match="float"):
        normalise(_body(f"vllm:prefix_cache_hits_total{{{LB}}} {value}"))


def test_negative_counter_is_a_parse_error() -> None:
    for line in (
        f"vllm:kv_offload_store_bytes_total{{{LB}}} -5",
        f"vllm:prefix_cache_hits_total{{{LB}}} -1",
        f'vllm:time_to_first_token_seconds_bucket{{{LB},le="+Inf"}} -3',
        f'vllm:prompt_tokens_by_source_total{{{LB},source="local_compute"}} -2',
    ):
        with pytest.raises(ParseError, match="negative"):
            normalise(_body(line))


@pytest.mark.parametrize("le", ["NaN", "-Inf", "-1"])
def test_impossible_bucket_bound_is_a_parse_error(le: str) -> None:
    with pytest.raises(ParseError, match="bound"):
        normalise(_body(f'vllm:time_to_first_token_seconds_bucket{{{LB},le="{le}"}} 1'))


def test_decreasing_bucket_counts_are_a_parse_error() -> None:
    h = "vllm:time_to_first_token_seconds"
    with pytest.raises(ParseError, match="cumulative"):
        normalise(_body(f'{h}_bucket{{{LB},le="0.1"}} 5', f'{h}_bucket{{{LB},le="+Inf"}} 3', f"{h}_count{{{LB}}} 3"))


def test_pid_children_overflow_is_a_parse_error_not_an_infinite_total() -> None:
    with pytest.raises(ParseError, match="non-finite"):
        normalise(
            _body(
                f'vllm:kv_offload_store_bytes_total{{{LB},pid="1"}} 1e308',
                f'vllm:kv_offload_store_bytes_total{{{LB},pid="2"}} 1e308',
            )
        )


def test_exact_duplicate_series_is_a_parse_error_not_summed() -> None:
    line = f"vllm:prefix_cache_hits_total{{{LB}}} 10"
    with pytest.raises(ParseError, match="duplicate"):
        normalise(_body(line, line))
    # Children that differ by pid are still summed (multiprocess mode).
    snap = normalise(_body(line.replace("}", ',pid="1"}'), line.replace("}", ',pid="2"}')))
    assert snap.engines[0].counters["gpu_prefix_hits"] == 20


def test_openmetrics_exemplars_are_parsed() -> None:
    h = "vllm:time_to_first_token_seconds"
    snap = normalise(
        _body(
            f'vllm:kv_offload_load_bytes_total{{{LB}}} 5 # {{trace_id="x}}y"}} 1.0 1700000000.0',
            f'{h}_bucket{{{LB},le="0.1"}} 3 # {{trace_id="abc"}} 0.05',
            f'{h}_bucket{{{LB},le="+Inf"}} 4',
            f"{h}_count{{{LB}}} 4",
        )
    )
    (e,) = snap.engines
    assert e.counters["offload_load_bytes"] == 5
    assert e.ttft is not None and e.ttft.counts == (3.0, 4.0)


def test_non_finite_gauges_and_info_numbers_are_never_emitted() -> None:
    body = _body(
        "# TYPE vllm:kv_offload_store_bytes_total counter",
        f"vllm:kv_offload_store_bytes_total{{{LB}}} 1",
        f"vllm:num_requests_waiting{{{LB}}} NaN",
        f"vllm:kv_cache_usage_perc{{{LB}}} +Inf",
        f'vllm:cache_config_info{{{LB},num_gpu_blocks="NaN",block_size="inf",kv_offloading_size="-1"}} 1',
    )
    snap = normalise(body)
    point = derive.advance(None, snap, 0.0)
    view = TargetView(label="a", url="http://h", up=True, snapshot=snap, derived=derive.derive([point], 0.0, 60.0))
    text = collect([view], "1m")
    for fam in families(text):
        for s in fam.samples:
            assert math.isfinite(s.value), s
            if fam.type == "counter":
                assert s.value >= 0, s
    assert "NaN" not in text and "Inf" not in text


def test_sample_limit_fails_the_poll_with_its_reason() -> None:
    from kvoffload_exporter.config.limits import Limits
    from kvoffload_exporter.ingest.exposition import LimitError

    lines = [f'vllm:prefix_cache_hits_total{{engine="{i}",model_name="m"}} 1' for i in range(50)]
    with pytest.raises(LimitError) as err:
        normalise(_body(*lines), Limits(sample_limit=20))
    assert err.value.reason == "sample_limit"
    normalise(_body(*lines), Limits(sample_limit=50, engine_limit=50))  # at the cap: fine
    for f in sorted((Path(__file__).parent / "fixtures").glob("*/*.prom")):
        normalise(f.read_text(), Limits())  # the defaults hold every real capture


def test_engine_limit_fails_the_poll_as_sample_limit() -> None:
    from kvoffload_exporter.config.limits import Limits
    from kvoffload_exporter.ingest.exposition import LimitError

    lines = [f'vllm:prefix_cache_hits_total{{engine="{i}",model_name="m"}} 1' for i in range(10)]
    with pytest.raises(LimitError, match="engines") as err:
        normalise(_body(*lines), Limits(engine_limit=9))
    assert err.value.reason == "sample_limit"


def test_label_value_length_limit_fails_the_poll_with_reason_label_limit() -> None:
    from kvoffload_exporter.config.limits import Limits
    from kvoffload_exporter.ingest.exposition import LimitError

    huge = "x" * 5000
    with pytest.raises(LimitError) as err:
        normalise(_body(f'vllm:prefix_cache_hits_total{{engine="0",model_name="{huge}"}} 1'))
    assert err.value.reason == "label_limit"
    snap = normalise(
        _body(f'vllm:prefix_cache_hits_total{{engine="0",model_name="{huge}"}} 1'),
        Limits(label_value_length_limit=10_000),
    )
    assert snap.engines[0].model_name == huge

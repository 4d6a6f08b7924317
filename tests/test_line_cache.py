"""A target's LineCache changes no reading: with it, every body gives the same snapshot or the same
error as without it, whatever the target sent before; and it stays inside its byte budgets."""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Mapping
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_fuzz_pipeline import BODIES, LIMITS

from kvoffload_exporter.ingest.exposition import ParseError, _lines
from kvoffload_exporter.ingest.linecache import LineCache
from kvoffload_exporter.ingest.normalise import normalise
from kvoffload_exporter.ingest.snapshot import Snapshot

CAPTURE = Path(__file__).parent / "fixtures" / "h200-0.6b" / "A_12_final.prom"


def _outcome(body: str, cache: LineCache | None) -> object:
    try:
        return _comparable(normalise(body, LIMITS, cache))
    except ParseError as e:
        return (e.reason, str(e))


def _comparable(x: object) -> object:
    """`x` with every NaN as the string "nan": a gauge may be NaN in the body (vLLM's cache usage with
    no blocks) and NaN != NaN, so two equal snapshots holding one would compare unequal."""
    if isinstance(x, float) and math.isnan(x):
        return "nan"
    if dataclasses.is_dataclass(x) and not isinstance(x, type):
        return (type(x), *(_comparable(getattr(x, f.name)) for f in dataclasses.fields(x)))
    if isinstance(x, Mapping):
        return {k: _comparable(v) for k, v in x.items()}
    if isinstance(x, tuple | list):
        return tuple(_comparable(v) for v in x)
    return x


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(BODIES, min_size=1, max_size=5))
def test_a_cache_warmed_by_any_earlier_bodies_reads_every_body_as_without_it(bodies: list[str]) -> None:
    cache = LineCache()
    for body in [*bodies, *bodies]:  # the second round reads every series from the cache
        assert _outcome(body, cache) == _outcome(body, None)


def _with_values(text: str, value: str) -> str:
    return re.sub(r"^(vllm:\S+(?:\{[^}]*\})?) \S+$", lambda m: f"{m.group(1)} {value}", text, flags=re.M)


def test_known_series_with_bad_values_fail_as_without_the_cache() -> None:
    text = CAPTURE.read_text()
    cache = LineCache()
    normalise(text, None, cache)
    for value in ("1e999", "1_000", "+nan", "NaN", "0x10", "1.2.3", "-1", ".", "", "1 2", "\t5"):
        body = _with_values(text, value)
        expected = _outcome_default(body, None)
        assert _outcome_default(body, cache) == expected, value
    doubled = text + "\n".join(line for line in text.splitlines() if line.startswith("vllm:prefix_cache_hits"))
    assert _outcome_default(doubled + "\n", cache) == _outcome_default(doubled + "\n", None)


def _outcome_default(body: str, cache: LineCache | None) -> Snapshot | tuple[str, str]:
    try:
        return normalise(body, None, cache)
    except ParseError as e:
        return (e.reason, str(e))


def test_the_cache_holds_what_a_real_body_repeats_and_no_more_than_its_budget() -> None:
    text = CAPTURE.read_text()
    cache = LineCache()
    normalise(text, None, cache)
    assert 100 < len(cache.known) < 400 and cache.size <= LineCache.MAX_BYTES
    hostile = "".join(f'vllm:prefix_cache_hits_total{{engine="0",model_name="m{i}"}} 1\n' for i in range(60_000))
    held = LineCache.held
    try:
        normalise(hostile, None, cache)
    except ParseError as e:
        assert e.reason == "sample_limit"
    assert cache.size <= LineCache.MAX_BYTES
    assert LineCache.held - held <= LineCache.MAX_BYTES
    before = LineCache.held
    size = cache.size
    del cache
    assert LineCache.held == before - size


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet="ab\n ", max_size=60), st.integers(1, 8))
def test_lines_a_block_at_a_time_are_the_lines_of_the_body(text: str, block: int) -> None:
    assert list(_lines(text, block)) == text.split("\n")

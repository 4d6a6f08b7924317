"""Probe classification: the real H200 captures around each canary step, and synthetic windows with
other users' traffic in them."""

from __future__ import annotations

import pytest

from kvoffload_exporter.canary.wire.classify import Deltas, classify, revisit_reason
from kvoffload_exporter.ingest.normalise import normalise
from tests.conftest import fixture_text

BPT = 114_688  # KV bytes per token of the Qwen3-0.6B shape


def _deltas(chain: str, before: str, after: str) -> Deltas:
    return Deltas.between(
        normalise(fixture_text(f"{chain}/{before}.prom")),
        normalise(fixture_text(f"{chain}/{after}.prom")),
        "Qwen/Qwen3-0.6B",
    )


# (before, after, expected prefix tokens, cached_tokens from the usage chunk, own tokens, result)
REAL_STEPS = [
    ("A_01_before_cold", "A_02_after_cold", 5952, 0, 6004, "miss"),
    ("A_02_after_cold", "A_03_after_gpu_hit", 5984, 5984, 6004, "gpu_hit"),
    ("A_04_after_pressure", "A_05_after_cpu_tier_hit", 5952, 5952, 6004, "offload_hit"),
    ("A_05_after_cpu_tier_hit", "A_06_after_gpu_hit_again", 5984, 5984, 6004, "gpu_hit"),
    ("A_06_after_gpu_hit_again", "A_07_after_salted_cold", 5952, 0, 6004, "miss"),
    # max_load_tokens: 0 on vLLM 0.26.0: the counters show the load the request asked not to do.
    ("A_08_before_max_load_tokens_0", "A_09_after_max_load_tokens_0", 5952, 5952, 6004, "offload_hit"),
    ("A_10_before_partial_hit", "A_11_after_partial_hit", 5952, 4096, 6004, "partial"),
]


@pytest.mark.parametrize("before,after,expected,cached,own,result", REAL_STEPS)
def test_real_h200_steps(before: str, after: str, expected: int, cached: int, own: int, result: str) -> None:
    d = _deltas("h200-0.6b", before, after)
    assert d.configured
    c = classify(expected, cached, d, own, BPT, tolerance=0)
    assert c.result == result
    assert not c.ambiguous
    assert c.others_tokens == 0  # nothing but the canary and its flush ran in these windows


def test_real_h200_steps_without_usage_details() -> None:
    """cached_tokens absent (no --enable-prompt-tokens-details): the counters alone decide."""
    assert (
        classify(5952, None, _deltas("h200-0.6b", "A_04_after_pressure", "A_05_after_cpu_tier_hit"), 6004, BPT).result
        == "offload_hit"
    )
    assert (
        classify(5984, None, _deltas("h200-0.6b", "A_02_after_cold", "A_03_after_gpu_hit"), 6004, BPT).result
        == "gpu_hit"
    )
    assert (
        classify(
            5952, None, _deltas("h200-0.6b", "A_06_after_gpu_hit_again", "A_07_after_salted_cold"), 6004, BPT
        ).result
        == "miss"
    )


def test_bytes_per_token_unknown_still_needs_loads_and_external_hits() -> None:
    d = _deltas("h200-0.6b", "A_04_after_pressure", "A_05_after_cpu_tier_hit")
    assert classify(5952, 5952, d, 6004, None).result == "offload_hit"


def test_no_connector_recompute_is_a_miss_and_a_repeat_a_gpu_hit() -> None:
    d = _deltas("h200-0.6b", "B_04_after_pressure", "B_05_after_recompute_no_tier")
    assert not d.configured and d.load_bytes == 0
    assert classify(5952, 0, d, 6004, None).result == "miss"
    d = _deltas("h200-0.6b", "B_05_after_recompute_no_tier", "B_06_after_gpu_hit_again")
    assert classify(5984, 5984, d, 6004, None).result == "gpu_hit"


def test_store_bytes_of_a_cold_seed() -> None:
    d = _deltas("h200-0.6b", "A_01_before_cold", "A_02_after_cold")
    assert d.store_bytes == 682_622_976 and d.prompt_tokens == 6004


# ---- other traffic in the window -------------------------------------------------------------------
P = 5120


def test_load_that_does_not_cover_the_prefix_is_not_an_offload_hit() -> None:
    d = Deltas(True, load_bytes=P // 2 * BPT, ext_hits=P // 2, gpu_hits=P // 2, prompt_tokens=P + 4)
    c = classify(P, P, d, P + 4, BPT, 15)
    assert c.result == "partial" and "did not cover" in c.note


def test_gpu_hit_while_others_load() -> None:
    # Others loaded a whole prefix's worth, but our GPU hits exceed what their prompt tokens allow.
    d = Deltas(True, load_bytes=P * BPT, ext_hits=P, gpu_hits=2 * P, prompt_tokens=P + 4 + P // 2)
    c = classify(P, P, d, P + 4, BPT, 15)
    assert c.result == "gpu_hit" and not c.ambiguous
    assert c.others_tokens == P // 2


def test_ambiguous_window_is_flagged() -> None:
    # Others sent enough to explain either the GPU hits or the load: keep it out of the statistics.
    d = Deltas(True, load_bytes=P * BPT, ext_hits=P, gpu_hits=P, prompt_tokens=3 * P)
    c = classify(P, P, d, P + 4, BPT, 15, expect="offload_hit")
    assert c.ambiguous and c.result == "offload_hit"
    c = classify(P, P, d, P + 4, BPT, 15, expect="gpu_hit")
    assert c.ambiguous and c.result == "gpu_hit"


def test_others_loads_do_not_turn_a_miss_into_a_hit() -> None:
    d = Deltas(True, load_bytes=P * BPT, ext_hits=P, gpu_hits=0, prompt_tokens=3 * P)
    assert classify(P, 0, d, P + 4, BPT, 15).result == "miss"


def test_offload_hit_with_unrelated_traffic() -> None:
    d = Deltas(True, load_bytes=P * BPT, store_bytes=10**9, ext_hits=P, gpu_hits=3000, prompt_tokens=P + 8000)
    c = classify(P, P, d, P + 4, BPT, 15)
    assert c.result == "offload_hit" and not c.ambiguous


def test_revisit_reasons() -> None:
    assert revisit_reason("miss", stored=False, loads_seen_before=False) == "no_store"
    assert revisit_reason("gpu_hit", stored=True, loads_seen_before=False) == "not_displaced"
    assert revisit_reason("partial", stored=True, loads_seen_before=False, gpu_part=True) == "not_displaced"
    assert revisit_reason("miss", stored=True, loads_seen_before=False) == "no_load"
    assert revisit_reason("miss", stored=True, loads_seen_before=True) == "evicted_from_tier"

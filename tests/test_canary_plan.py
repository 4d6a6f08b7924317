"""Canary planning: sizes from cache_config_info, prompts, salts and versions."""

from __future__ import annotations

import pytest

from kvoffload_exporter.canary.cycle.plan import (
    CacheFacts,
    PlanError,
    Prompts,
    check_salt,
    honours_max_load_tokens,
    parse_version,
    size,
)
from kvoffload_exporter.ingest.normalise import normalise
from tests.conftest import fixture_text

H200 = CacheFacts(block_size=16, num_gpu_blocks=640, max_model_len=8192, offload_configured=True)


def test_facts_from_the_real_h200_exposition() -> None:
    snap = normalise(fixture_text("h200-0.6b/A_00_initial.prom"))
    facts = CacheFacts.from_engine(snap.engines[0], 8192, snap.offload_configured)
    assert facts == H200
    assert facts.gpu_cache_tokens == 10_240
    assert facts.chunk_tokens is None  # vLLM 0.26 does not export the offload chunk


def test_default_sizing_on_the_h200_shape() -> None:
    s = size(H200)
    assert (s.align, s.chunk_known) == (256, False)
    assert s.prefix_tokens == 5120 and s.prefix_tokens % 256 == 0
    assert s.tail_tokens == 8 and s.tail_tokens < 16  # shorter than a GPU block
    assert s.prompt_tokens <= 8191
    assert s.filler_count * s.filler_tokens >= 1.5 * 10_240  # fillers evict the whole GPU cache
    assert s.flush_tokens < 16
    assert s.prefix_tokens >= 4 * s.align  # at least four offload chunks


def test_known_chunk_and_overrides() -> None:
    s = size(H200, prefix_tokens=6000, chunk_tokens=64)
    assert (s.align, s.chunk_known, s.prefix_tokens) == (64, True, 5952)
    s = size(H200, filler_tokens=2000)
    assert s.filler_tokens == 2000 and s.filler_count == 8
    s = size(CacheFacts(block_size=16, num_gpu_blocks=40_000, max_model_len=32_768))
    assert s.prefix_tokens == 8192  # capped for big caches
    s = size(CacheFacts(block_size=128, num_gpu_blocks=2048, max_model_len=8192))
    assert s.align == 256 and s.tail_tokens == 8


def test_two_resident_prefixes_share_the_cache() -> None:
    s = size(H200, resident=2)
    assert s.prefix_tokens == 3328 and 2 * s.prompt_tokens <= 10_240
    with pytest.raises(PlanError, match="recompute control"):
        size(H200, prefix_tokens=5120, resident=2)


def test_unknown_cache_gives_no_fillers() -> None:
    s = size(CacheFacts())
    assert s.filler_count == 0 and s.prefix_tokens == 4096


@pytest.mark.parametrize(
    "facts,kw",
    [
        (CacheFacts(block_size=16, num_gpu_blocks=640, max_model_len=1024), {}),
        (H200, {"prefix_tokens": 100}),
        (H200, {"prefix_tokens": 9000}),
        (CacheFacts(block_size=16, num_gpu_blocks=100, max_model_len=8192), {"prefix_tokens": 4096}),
    ],
)
def test_impossible_plans_are_refused(facts: CacheFacts, kw: dict) -> None:
    with pytest.raises(PlanError):
        size(facts, **kw)


def test_prompts_are_deterministic_distinct_and_in_range() -> None:
    s = size(H200)
    p1, p2 = Prompts(b"k" * 32, "n1"), Prompts(b"k" * 32, "n1")
    assert p1.prefix(s, 1, "A") == p2.prefix(s, 1, "A")
    assert p1.prefix(s, 1, "A") != p1.prefix(s, 2, "A") != p1.prefix(s, 1, "B")
    assert Prompts(b"k" * 32, "n2").prefix(s, 1, "A") != p1.prefix(s, 1, "A")  # restarts never reuse
    assert p1.tail(s) != p1.tail(s)
    toks = p1.prefix(s, 1, "A")
    assert len(toks) == s.prefix_tokens and all(1000 <= t < 30000 for t in toks)


def test_salts_are_fixed_per_secret_valid_and_not_revealed() -> None:
    a, b = Prompts(b"a" * 32, "n1"), Prompts(b"a" * 32, "n2")
    assert a.salt == b.salt  # fixed per installation
    assert Prompts(b"b" * 32, "n1").salt != a.salt
    fresh = {a.fresh_salt("cold") for _ in range(5)}
    assert len(fresh) == 5
    for salt in fresh | {a.salt}:
        assert check_salt(salt) == salt and len(salt) <= 128
        assert not set(salt) & set("@/\\\x00")
    assert a.salt not in a.fingerprint and len(a.fingerprint) == 12
    for bad in ("", "x" * 129, "a/b", "a@b", "a\\b"):
        with pytest.raises(ValueError):
            check_salt(bad)


def test_versions() -> None:
    assert parse_version("0.26.0") == (0, 26, 0)
    assert parse_version("0.11.0rc1+cu130") == (0, 11, 0)
    assert parse_version(None) is None and parse_version("dev") is None
    assert honours_max_load_tokens("0.26.0") is False
    assert honours_max_load_tokens("0.32.0") is True
    assert honours_max_load_tokens(None) is None

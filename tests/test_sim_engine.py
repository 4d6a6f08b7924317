"""Engine model: block hashing, GPU LRU, CPU tier, hit granularity, salts, kv_transfer_params per version."""

from __future__ import annotations

import random

import pytest

from kvoffload_exporter.sim.cache import CpuTier, GpuPrefixCache, block_hashes, chunk_hashes
from kvoffload_exporter.sim.calibration import H200_QWEN3_0_6B, H200_QWEN3_32B, QWEN3_0_6B, QWEN3_32B
from kvoffload_exporter.sim.engine import Engine, EngineConfig, SimRequest
from kvoffload_exporter.sim.timing import TimeModel
from kvoffload_exporter.sim.versions import behaviour, parse_version


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def make_engine(version: str = "0.26.0", **cfg: object) -> tuple[Engine, Clock]:
    clock = Clock()
    config = EngineConfig.from_calibration(H200_QWEN3_0_6B, **cfg)
    engine = Engine(
        0,
        config,
        behaviour(version),
        TimeModel(H200_QWEN3_0_6B, random.Random(1), noise=False),
        clock,
        lambda: 1.7e9 + clock.now,
        random.Random(2),
    )
    return engine, clock


def send(engine: Engine, clock: Clock, prompt: tuple[int, ...], **kw: object):
    plan = engine.submit(SimRequest(prompt, max_tokens=kw.pop("max_tokens", 1), **kw), clock())  # type: ignore[arg-type]
    clock.now = plan.finish_at + 2.0  # past the store report delay
    engine.advance(clock.now)
    return plan


def ids(start: int, n: int) -> tuple[int, ...]:
    return tuple(range(start, start + n))


P = ids(1000, 6000)


def evict(engine: Engine, clock: Clock, n: int = 2) -> None:
    for i in range(n):
        send(engine, clock, ids(100_000 * (i + 1), 6000))


# ---- hashing and caches ----------------------------------------------------------------------------


def test_kv_bytes_per_token_of_the_calibrated_shapes() -> None:
    assert QWEN3_0_6B.kv_bytes_per_token == 114_688
    assert QWEN3_32B.kv_bytes_per_token == 262_144
    cfg = EngineConfig.from_calibration(H200_QWEN3_0_6B)
    assert (cfg.chunk_bytes, cfg.num_cpu_chunks) == (7_340_032, 1089)
    assert EngineConfig.from_calibration(H200_QWEN3_32B).num_cpu_chunks == 953


def test_salt_goes_into_the_first_block_and_the_chain_makes_every_block_differ() -> None:
    plain = block_hashes(P, 16)
    salted = block_hashes(P, 16, "s1")
    assert len(plain) == 375 and not set(plain) & set(salted)
    assert block_hashes(P, 16, "s1") == salted and block_hashes(P, 16, "s2") != salted
    # the salt changes nothing but the chain: a different first block also changes every later hash
    other_head = block_hashes((7, *P[1:]), 16)
    assert not set(other_head) & set(plain)
    # same prefix → same leading hashes, whatever follows
    assert block_hashes(P[:4096] + ids(9, 100), 16)[:256] == plain[:256]


def test_chunks_are_keyed_by_their_last_block() -> None:
    h = block_hashes(P, 16)
    chunks = chunk_hashes(h, 4)
    assert len(chunks) == 93 and chunks[0] == h[3] and chunks[-1] == h[371]


def test_gpu_cache_lru_evicts_tail_first_and_never_pinned_blocks() -> None:
    cache = GpuPrefixCache(8)
    a, b = block_hashes(ids(0, 64), 16), block_hashes(ids(500, 64), 16)
    lease_a = cache.allocate([], a, 0)
    cache.release(lease_a)
    lease_b = cache.allocate([], b, 0)  # fits: 8 blocks
    assert cache.match(a) == 4 and cache.usage() == 0.5
    c = block_hashes(ids(900, 32), 16)
    cache.allocate([], c, 0)  # needs 2 blocks: evicts a's tail (freed tail-first), b is pinned
    assert cache.match(a) == 2 and cache.match(b) == 4
    cache.release(lease_b)
    assert cache.usage() == pytest.approx(2 / 8)


def test_cpu_tier_lru_capacity_and_allocation_failure() -> None:
    tier = CpuTier(4)
    assert tier.store([b"a", b"b", b"c"]).new_chunks == 3
    assert tier.store([b"a", b"d"]).new_chunks == 1  # `a` is already there
    tier.touch([b"a"])
    assert tier.store([b"e"]).new_chunks == 1  # evicts the least recently used: b
    assert b"b" not in tier and b"a" in tier and len(tier) == 4
    assert tier.lookup([b"a", b"c", b"x", b"d"]) == 2
    assert tier.store([b"1", b"2", b"3", b"4", b"5"]).failed  # more than the tier can hold
    tier.forgetful = True
    assert tier.lookup([b"a"]) == 0 and tier.store([b"a"]).new_chunks == 1


# ---- requests --------------------------------------------------------------------------------------


def test_cold_gpu_hit_eviction_cpu_tier_hit_and_gpu_hit_again() -> None:
    engine, clock = make_engine()
    cold = send(engine, clock, P)
    assert (cold.gpu_hit, cold.external_hit, cold.stored_chunks) == (0, 0, 93)
    assert engine.stats.counter("kv_offload_store_bytes") == 682_622_976
    gpu = send(engine, clock, P)
    assert (gpu.gpu_hit, gpu.external_hit) == (5984, 0)  # 374 blocks: the last token is recomputed
    evict(engine, clock)
    cpu = send(engine, clock, P)
    assert (cpu.gpu_hit, cpu.external_hit, cpu.load_bytes, cpu.computed) == (0, 5952, 682_622_976, 48)
    assert send(engine, clock, P).gpu_hit == 5984  # the loaded blocks are GPU-resident again
    s = engine.stats
    assert s.counter("external_prefix_cache_hits") == 5952
    assert s.counter("prompt_tokens_by_source", ("external_kv_transfer",)) == 5952
    assert s.counter("kv_offload_store_bytes") == 3 * 682_622_976  # P and the two evicting prompts only


def test_external_queries_are_the_tokens_the_gpu_did_not_have() -> None:
    engine, clock = make_engine()
    send(engine, clock, P)
    send(engine, clock, P)
    assert engine.stats.counter("external_prefix_cache_queries") == 6000 + 16
    old, clock_old = make_engine("0.15.1")
    send(old, clock_old, P)
    send(old, clock_old, P)
    assert old.stats.counter("external_prefix_cache_queries") == 12_000  # 0.12–0.15: the whole prompt


def test_salted_requests_never_share_gpu_or_tier_entries() -> None:
    engine, clock = make_engine()
    send(engine, clock, P, cache_salt="a")
    salted = send(engine, clock, P, cache_salt="b")
    assert (salted.gpu_hit, salted.external_hit, salted.stored_chunks) == (0, 0, 93)
    again = send(engine, clock, P, cache_salt="a")  # b evicted a's tail blocks: the tier has them
    assert (again.gpu_hit, again.external_hit) == (4224, 1728)
    evict(engine, clock)
    assert send(engine, clock, P).external_hit == 0  # never stored without a salt
    assert send(engine, clock, P, cache_salt="b").gpu_hit == 0


def test_partial_prefix_hits_are_whole_blocks_and_whole_chunks() -> None:
    engine, clock = make_engine()
    send(engine, clock, P)
    part = send(engine, clock, P[:1000] + ids(500_000, 1000))
    assert part.gpu_hit == 992  # 62 blocks of 16
    evict(engine, clock)
    stored = engine.stats.counter("kv_offload_store_bytes")
    partial = send(engine, clock, P[:4096] + ids(600_000, 1904))
    assert (partial.external_hit, partial.load_bytes) == (4096, 469_762_048)
    assert engine.stats.counter("kv_offload_store_bytes") - stored == 212_860_928  # 29 new chunks


def test_external_hit_after_a_gpu_hit_ending_mid_chunk() -> None:
    # real-runs §4: local 4208 (263 blocks), external 1744, computed 52 (incl. a 4-token flush)
    engine, clock = make_engine()
    send(engine, clock, P)
    evict(engine, clock)
    engine.gpu.clear()
    send(engine, clock, P[: 4208 + 5] + ids(700_000, 100))  # puts P's first 263 blocks on the GPU
    plan = send(engine, clock, P)
    assert (plan.gpu_hit, plan.external_hit, plan.computed) == (4208, 1744, 48)
    assert plan.load_bytes == 1744 * 114_688


def test_full_prompt_in_the_tier_still_computes_the_last_chunk() -> None:
    engine, clock = make_engine()
    p = ids(1000, 6016)  # 94 whole chunks
    send(engine, clock, p)
    evict(engine, clock)
    plan = send(engine, clock, p)
    assert (plan.external_hit, plan.computed) == (5952, 64)


def test_max_load_tokens_ignored_by_026_and_honoured_by_032() -> None:
    for version, expect in (("0.26.0", 5952), ("0.32.0", 0)):
        engine, clock = make_engine(version)
        send(engine, clock, P)
        evict(engine, clock)
        plan = send(engine, clock, P, kv_transfer_params={"max_load_tokens": 0})
        assert plan.external_hit == expect, version
    engine, clock = make_engine("0.32.0")
    send(engine, clock, P)
    evict(engine, clock)
    assert send(engine, clock, P, kv_transfer_params={"max_load_tokens": 1000}).external_hit == 960
    evict(engine, clock)
    assert send(engine, clock, P, kv_transfer_params={"max_load_tokens": "0"}).external_hit == 5952  # not an int
    evict(engine, clock)
    assert send(engine, clock, P, kv_transfer_params={"kv_load_tiers": []}).external_hit == 0


def test_max_offload_tokens_from_023() -> None:
    for version, expect in (("0.22.1", 93), ("0.23.0", 16)):
        engine, clock = make_engine(version)
        plan = send(engine, clock, P, kv_transfer_params={"max_offload_tokens": 1024})
        assert plan.stored_chunks == expect, version
    engine, clock = make_engine("0.26.0")
    assert send(engine, clock, P, kv_transfer_params={"max_offload_tokens": 0}).stored_chunks == 0


def test_prompt_logprobs_read_no_cache() -> None:
    engine, clock = make_engine()
    send(engine, clock, P)
    plan = send(engine, clock, P, skip_prefix_cache=True)
    assert plan.cached == 0 and engine.stats.counter("prefix_cache_queries") == 12_000


def test_016_folds_recomputed_tokens_into_local_cache_hit() -> None:
    engine, clock = make_engine("0.16.0")
    send(engine, clock, P)
    send(engine, clock, P)
    s = engine.stats
    assert s.counter("prompt_tokens_recomputed") == 16
    assert s.counter("prompt_tokens_by_source", ("local_cache_hit",)) == 6000
    assert s.counter("prefix_cache_hits") == 5984


def test_without_connector_nothing_is_offloaded() -> None:
    engine, clock = make_engine(connector=False)
    send(engine, clock, P)
    evict(engine, clock)
    plan = send(engine, clock, P, kv_transfer_params={"max_load_tokens": 0})
    assert (plan.external_hit, plan.computed) == (0, 6000)
    assert "kv_offload_store_bytes" not in engine.stats.counters
    assert engine.stats.counter("external_prefix_cache_queries") == 0


def test_restart_zeroes_counters_and_caches() -> None:
    engine, clock = make_engine()
    send(engine, clock, P)
    created = engine.stats.started
    clock.now += 10
    engine.restart()
    assert engine.stats.counters.get("prompt_tokens", {}) == {} and engine.stats.started > created
    assert send(engine, clock, P).cached == 0


def test_concurrent_requests_queue_behind_each_other() -> None:
    engine, clock = make_engine()
    a = engine.submit(SimRequest(ids(0, 6000), max_tokens=1), clock())
    b = engine.submit(SimRequest(ids(10_000, 6000), max_tokens=1), clock())
    assert b.scheduled_at == pytest.approx(a.first_token_at)
    assert b.queue_s > a.queue_s
    engine.advance(a.scheduled_at + 1e-6)
    assert engine.stats.gauges["num_requests_running"][()] == 1
    assert engine.stats.gauges["num_requests_waiting"][()] == 1


def test_response_metrics_exclude_the_queue_wait() -> None:
    engine, clock = make_engine()
    send(engine, clock, P)
    evict(engine, clock)
    plan = send(engine, clock, P, max_tokens=3)
    m = engine.response_metrics(plan)
    assert m["queue_time_ms"] == pytest.approx(24.51, abs=0.1)  # 17.96 ms copy + 6.55 ms wait
    assert m["time_to_first_token_ms"] == pytest.approx(19.35 + 48 * 0.001387 + 8.0 + 3.44, abs=0.01)
    assert m["mean_itl_ms"] == pytest.approx(6.0)


def test_version_parsing() -> None:
    assert parse_version("0.26.0") == (0, 26) and parse_version("v0.32.0+cpu") == (0, 32)
    for bad in ("0.9.2", "1.0.0", "latest"):
        with pytest.raises(ValueError):
            parse_version(bad)

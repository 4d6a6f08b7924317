"""What an engine's caches hold, read from what it exports: GPU pool, tier size, chunk, KV bytes per token.

Pure facts of one engine's newest scrape (`EngineSignals`: `cache_config_info`, `kv_offload_config_info`,
evidence gauges), shared by the state (derive), its reasons and the payback, so none of them asks the
collector. Unknown is None, never a guess.
"""

from __future__ import annotations

from kvoffload_exporter.enums import CapacityBasis, ConfigWarning, Signal
from kvoffload_exporter.ingest.backends.schema import Evidence
from kvoffload_exporter.ingest.exposition import info_number
from kvoffload_exporter.ingest.snapshot import EngineSignals, Snapshot

GIB = float(2**30)


def gpu_pool_tokens(e: EngineSignals) -> float | None:
    """num_gpu_blocks × block_size from cache_config_info (None when vLLM does not export it)."""
    blocks, size = info_number(e.cache_config.get("num_gpu_blocks")), info_number(e.cache_config.get("block_size"))
    return blocks * size if blocks is not None and size is not None else None


def kv_bytes_per_token(e: EngineSignals) -> float | None:
    """KV bytes of one token: the tier's own size in bytes and tokens (0.33), else the GPU cache's
    (cache_config_info kv_cache_memory_bytes / kv_cache_size_tokens), else the engine's loads since it
    started (load bytes / tokens served from outside). None when none of them is exported."""
    for num, den in (
        (e.offload_config.get("cpu_kv_cache_size_bytes"), e.offload_config.get("cpu_kv_cache_size_tokens")),
        (e.cache_config.get("kv_cache_memory_bytes"), e.cache_config.get("kv_cache_size_tokens")),
    ):
        b, t = info_number(num), info_number(den)
        if b and t and b > 0 and t > 0:
            return b / t
    loaded, tokens = e.counters.get(Signal.OFFLOAD_LOAD_BYTES), e.counters.get(Signal.EXTERNAL_PREFIX_HITS)
    return loaded / tokens if loaded and tokens and loaded > 0 and tokens > 0 else None


def tier_tokens(e: EngineSignals) -> float | None:
    """Tokens the offload tier holds: kv_offload_config_info (0.33), else the tier bytes over the GPU
    cache's bytes per token (cache_config_info kv_cache_memory_bytes / kv_cache_size_tokens)."""
    exact = _declared_tokens(e)
    if exact is not None:
        return exact
    tier = info_number(e.offload_config.get("cpu_kv_cache_size_bytes"))
    if tier is None:
        gib = info_number(e.cache_config.get("kv_offloading_size"))
        tier = gib * GIB if gib is not None else None
    mem = info_number(e.cache_config.get("kv_cache_memory_bytes"))
    toks = info_number(e.cache_config.get("kv_cache_size_tokens"))
    if tier is None or not mem or not toks:
        return None
    return tier / (mem / toks)


def _declared_tokens(e: EngineSignals) -> float | None:
    """The tier's own token count: per tier from the backend table (a tiering spec's `0:primary` declares
    it, its secondary tiers declare empty labels), else the engine's kv_offload_config_info."""
    per_tier = [v for k, v in e.evidence_gauges.items() if k.signal == Evidence.CAPACITY and k.unit == "tokens"]
    if per_tier:
        return sum(per_tier)
    return info_number(e.offload_config.get("cpu_kv_cache_size_tokens"))


def chunk_tokens(e: EngineSignals) -> float | None:
    """The tier's matching unit: cpu_blocks_per_chunk × block_size (0.33); vLLM < 0.33 does not say."""
    per, size = info_number(e.offload_config.get("cpu_blocks_per_chunk")), info_number(e.cache_config.get("block_size"))
    return per * size if per is not None and size is not None else None


def tier_bytes(e: EngineSignals, configured: float | None) -> float | None:
    """CPU-tier capacity: kv_offload_config_info (0.33), cache_config kv_offloading_size (GiB), config."""
    primary = [v for k, v in e.evidence_gauges.items() if k.signal == Evidence.CAPACITY and k.unit == "bytes"]
    if primary:  # per tier (tiering: only 0:primary declares a size), never overwritten by an empty tier
        return sum(primary)
    exact = info_number(e.offload_config.get("cpu_kv_cache_size_bytes"))
    if exact is not None:
        return exact
    gib = info_number(e.cache_config.get("kv_offloading_size"))
    return gib * GIB if gib is not None else configured


Capacity = tuple[tuple[str, CapacityBasis, float], ...]
"""(tier, basis, tokens) per cache of one engine: `gpu`, then the offload tier `cpu` where its size is known."""


def kv_capacity(e: EngineSignals, configured_tier: float | None, offload: bool) -> Capacity:
    """What an engine's caches hold in tokens, for routers, autoscalers and sizing: the GPU pool, and the CPU
    tier from its own token count (0.33+) or its bytes over the KV bytes per token (saying which)."""
    out: list[tuple[str, CapacityBasis, float]] = []
    gpu = gpu_pool_tokens(e)
    if gpu is not None:
        out.append(("gpu", CapacityBasis.NUM_GPU_BLOCKS, gpu))
    if not offload:
        return tuple(out)
    exact = _declared_tokens(e)
    if exact is not None:
        out.append(("cpu", CapacityBasis.CPU_KV_CACHE_SIZE_TOKENS, exact))
        return tuple(out)
    size, per = tier_bytes(e, configured_tier), kv_bytes_per_token(e)
    if size and per:
        out.append(("cpu", CapacityBasis.TIER_BYTES, size / per))
    return tuple(out)


def config_warnings(capacity: Capacity) -> tuple[ConfigWarning, ...]:
    """Warnings a configuration fact alone raises: a tier holding fewer tokens than the GPU pool loses a
    prefix before the GPU does (store-on-compute), so it can never serve one (state reason
    tier_smaller_than_gpu_pool says the same once traffic shows it)."""
    tokens = {tier: v for tier, _, v in capacity}
    if "cpu" in tokens and "gpu" in tokens and tokens["cpu"] < tokens["gpu"]:
        return (ConfigWarning.TIER_SMALLER_THAN_GPU_POOL,)
    return ()


def snapshot_tier_bytes(snap: Snapshot | None, configured: float | None) -> float | None:
    """Σ tier bytes over a scrape's engines (each DP engine pins its own tier); None when unknown."""
    if snap is None or not snap.offload_configured:
        return None
    known = [b for b in (tier_bytes(e, configured) for e in snap.engines) if b is not None]
    return sum(known) if known else None


__all__ = [
    "Capacity",
    "chunk_tokens",
    "config_warnings",
    "gpu_pool_tokens",
    "kv_bytes_per_token",
    "kv_capacity",
    "snapshot_tier_bytes",
    "tier_bytes",
    "tier_tokens",
]

"""Why an engine stores and never loads (or loads but loses stores): one closed `StateReason` per engine.

Pure: inputs are the windowed `EngineDerived`, the engine's newest `EngineSignals` (cumulative counters,
`cache_config_info`, `kv_offload_config_info`), the families the scrape carried and optional canary facts;
the output is a reason or None (nothing needs explaining). One rule per reason, checked in `StateReason`
order: the first that holds wins, so a missing metric is never mistaken for a workload property and the
cheapest fix (wait, enlarge the tier) is named before the diagnosis that needs the canary.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from exporter.derive import EngineDerived
from exporter.enums import Signal, State, StateReason
from exporter.exposition import info_number
from exporter.model import EngineSignals

NO_REUSE_HIT_RATIO = 0.05
"""GPU prefix hit ratio below which reuse is incidental: the workload has (almost) no repeated prefix."""

FULL_INFLIGHT = 0.99
"""Share of tier chunks pinned by in-flight transfers at which new stores back-pressure (tier full)."""

SKIPPED_QUERY_SHARE = 0.5
"""Below this share of prompt tokens looked up in the prefix cache, requests skip reading the cache."""

_LOAD_FAMILY, _STORE_FAMILY = "vllm:kv_offload_load_bytes", "vllm:kv_offload_store_bytes"
_EXT_QUERIES, _EXT_HITS = "vllm:external_prefix_cache_queries", "vllm:external_prefix_cache_hits"


@dataclass(frozen=True)
class CanaryFacts:
    """What the canary learnt about the target (exporter/canary/state.py), or nothing when it does not run."""

    no_load_cycles: int = 0  # displaced revisits that loaded nothing, target never loaded (CycleReason.NO_LOAD)
    evicted_from_tier_cycles: int = 0  # displaced revisits that missed although the target loaded before
    retention_seconds: float | None = None  # longest idle time still loaded from the tier (wait ladder)


@dataclass(frozen=True)
class Inputs:
    d: EngineDerived
    e: EngineSignals
    families: frozenset[str]
    canary: CanaryFacts | None

    def delta(self, s: Signal) -> float:
        return self.d.deltas.get(s, 0.0)


def gpu_pool_tokens(e: EngineSignals) -> float | None:
    """num_gpu_blocks × block_size from cache_config_info (None when vLLM does not export it)."""
    blocks, size = info_number(e.cache_config.get("num_gpu_blocks")), info_number(e.cache_config.get("block_size"))
    return blocks * size if blocks is not None and size is not None else None


def tier_tokens(e: EngineSignals) -> float | None:
    """Tokens the offload tier holds: kv_offload_config_info (0.33), else the tier bytes over the GPU
    cache's bytes per token (cache_config_info kv_cache_memory_bytes / kv_cache_size_tokens)."""
    exact = info_number(e.offload_config.get("cpu_kv_cache_size_tokens"))
    if exact is not None:
        return exact
    tier = info_number(e.offload_config.get("cpu_kv_cache_size_bytes"))
    if tier is None:
        gib = info_number(e.cache_config.get("kv_offloading_size"))
        tier = gib * 2**30 if gib is not None else None
    mem = info_number(e.cache_config.get("kv_cache_memory_bytes"))
    toks = info_number(e.cache_config.get("kv_cache_size_tokens"))
    if tier is None or not mem or not toks:
        return None
    return tier / (mem / toks)


def chunk_tokens(e: EngineSignals) -> float | None:
    """The tier's matching unit: cpu_blocks_per_chunk × block_size (0.33); vLLM < 0.33 does not say."""
    per, size = info_number(e.offload_config.get("cpu_blocks_per_chunk")), info_number(e.cache_config.get("block_size"))
    return per * size if per is not None and size is not None else None


def _metric_missing(i: Inputs) -> bool:
    """Stores are exported but the load (or external-hit) family is not there at all (dynamo #4549)."""
    f = i.families
    return (_STORE_FAMILY in f and _LOAD_FAMILY not in f) or (_EXT_QUERIES in f and _EXT_HITS not in f)


def _warming_up(i: Inputs) -> bool:
    """Fewer prompt tokens since the engine started than the GPU pool holds: nothing stored can have been
    evicted from the GPU yet, so no load is possible (store-on-compute: the tier is a superset of HBM)."""
    pool = gpu_pool_tokens(i.e)
    prompts = i.e.counters.get(Signal.PROMPT_TOKENS)
    return pool is not None and prompts is not None and prompts < pool


def _stores_dropped(i: Inputs) -> bool:
    """Allocation failures, stores skipped, or every chunk pinned by in-flight transfers (backpressure)."""
    dropped = i.delta(Signal.OFFLOAD_ALLOCATION_FAILURES) + i.delta(Signal.OFFLOAD_STORES_SKIPPED)
    return dropped > 0 or (i.e.offload_inflight or 0.0) >= FULL_INFLIGHT


def _tier_smaller(i: Inputs) -> bool:
    """A prefix leaves the GPU before it leaves a tier larger than the pool; a smaller tier has already
    evicted it (vllm#56871: 3.3 M tier tokens under a 5.29 M-token GPU pool)."""
    tier, pool = tier_tokens(i.e), gpu_pool_tokens(i.e)
    return tier is not None and pool is not None and tier < pool


def _prefix_short(i: Inputs) -> bool:
    """The reused prefix per request is shorter than one tier chunk: the GPU matches 16-token blocks, the
    tier only whole chunks (vllm#54607)."""
    chunk, n = chunk_tokens(i.e), i.d.ttft_count
    if chunk is None or n <= 0 or chunk <= (info_number(i.e.cache_config.get("block_size")) or 0.0):
        return False
    return i.delta(Signal.GPU_PREFIX_HITS) / n < chunk


def _loads_skipped(i: Inputs) -> bool:
    """Prompt tokens grew but (almost) none were looked up: requests skip reading the cache (prompt
    logprobs, `max_load_tokens: 0`; vllm#57596)."""
    prompts = i.delta(Signal.PROMPT_TOKENS)
    queries = i.d.deltas.get(Signal.GPU_PREFIX_QUERIES)
    return prompts > 0 and queries is not None and queries < SKIPPED_QUERY_SHARE * prompts


def _evicted_before_reuse(i: Inputs) -> bool:
    """The canary's wait ladder saw its prefix leave the tier before its revisit."""
    return i.canary is not None and i.canary.evicted_from_tier_cycles > 0


def _lookup_misses(i: Inputs) -> bool:
    """The tier is asked (external queries grow) and never answers; with the canary: a displaced prefix
    that was stored was not loaded on revisit (vllm#47890 hybrid KV groups, #53498 SimpleCPU)."""
    if i.canary is not None and i.canary.no_load_cycles > 0:
        return True
    return (
        i.delta(Signal.EXTERNAL_PREFIX_QUERIES) > 0 and i.delta(Signal.EXTERNAL_PREFIX_HITS) <= 0 and not _no_reuse(i)
    )


def _no_reuse(i: Inputs) -> bool:
    """Reuse is incidental: the GPU hit ratio is below NO_REUSE_HIT_RATIO and nothing came from outside."""
    ratio = i.d.gpu_hit_ratio
    return ratio is not None and ratio < NO_REUSE_HIT_RATIO and i.delta(Signal.EXTERNAL_PREFIX_HITS) <= 0


RULES: tuple[tuple[StateReason, Callable[[Inputs], bool]], ...] = (
    (StateReason.METRIC_MISSING, _metric_missing),
    (StateReason.WARMING_UP, _warming_up),
    (StateReason.STORES_DROPPED, _stores_dropped),
    (StateReason.TIER_SMALLER_THAN_GPU_POOL, _tier_smaller),
    (StateReason.PREFIX_SHORTER_THAN_BLOCK, _prefix_short),
    (StateReason.LOADS_SKIPPED_BY_REQUEST, _loads_skipped),
    (StateReason.EVICTED_BEFORE_REUSE, _evicted_before_reuse),
    (StateReason.NO_REUSE_IN_WORKLOAD, _no_reuse),
    (StateReason.LOOKUP_ALWAYS_MISSES, _lookup_misses),
)
"""Every reason's rule, in the order they are tried (each StateReason has exactly one)."""


HINTS: dict[StateReason, str] = {
    StateReason.METRIC_MISSING: "the load or external-hit family is not exported: loads may happen unseen; "
    "check the vLLM/connector version before concluding anything",
    StateReason.WARMING_UP: "fewer prompt tokens since start than the GPU pool holds: nothing stored has "
    "left the GPU yet, wait",
    StateReason.STORES_DROPPED: "allocation failures, skipped stores or a tier pinned by in-flight transfers: "
    "the tier loses blocks; enlarge it or lower the store rate",
    StateReason.TIER_SMALLER_THAN_GPU_POOL: "the tier holds fewer tokens than the GPU pool, so a prefix "
    "evicted from the GPU is already gone from the tier; make it larger than the pool or disable it",
    StateReason.PREFIX_SHORTER_THAN_BLOCK: "the prefix reused per request is shorter than one offload chunk: "
    "the tier only matches whole chunks; use a smaller chunk (block) size",
    StateReason.LOADS_SKIPPED_BY_REQUEST: "most prompt tokens are never looked up: requests skip reading "
    "the cache (prompt logprobs, max_load_tokens 0)",
    StateReason.EVICTED_BEFORE_REUSE: "the canary's prefix left the tier before its revisit: reuse comes "
    "later than the tier's retention (kvoffload_tier_retention_seconds)",
    StateReason.LOOKUP_ALWAYS_MISSES: "the tier is asked and never hits: the load path is broken "
    "(hybrid KV groups vllm#47890, SimpleCPU #53498); run check",
    StateReason.NO_REUSE_IN_WORKLOAD: "GPU prefix hit ratio below 5 %: the workload barely repeats prefixes; "
    "set store_threshold >= 2 or disable offload",
}
"""One line per reason: what it means and what to do (inspect's text; the runbook has the long form)."""


def explain(
    d: EngineDerived, e: EngineSignals, families: frozenset[str], canary: CanaryFacts | None = None
) -> StateReason | None:
    """The reason for a `store_without_load` state, or `stores_dropped` for a degraded `hit`; else None."""
    i = Inputs(d, e, families, canary)
    if d.state == State.HIT:
        # The engine loads: the only thing to explain is a tier that is losing stores.
        return StateReason.STORES_DROPPED if _stores_dropped(i) else None
    if d.state != State.STORE_WITHOUT_LOAD:
        return None
    # None when no rule holds: an unexplained state is said as such, never guessed.
    return next((reason for reason, rule in RULES if rule(i)), None)


__all__ = ["HINTS", "RULES", "CanaryFacts", "chunk_tokens", "explain", "gpu_pool_tokens", "tier_tokens"]

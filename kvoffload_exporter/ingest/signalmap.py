"""Which vLLM family feeds which logical signal, per generation (0.10 → 0.33): the tables `normalise`
folds samples by. Pure declarations; `kvoffload_exporter.ingest.families` lists the same families with their types.
"""

from __future__ import annotations

from kvoffload_exporter.ingest.families import HISTOGRAMS as _TYPED_HISTOGRAMS
from kvoffload_exporter.ingest.snapshot import Signal

# Canonical family -> counter signal. Order matters only for the alias families below.
FLAT = {
    "vllm:kv_offload_load_bytes": Signal.OFFLOAD_LOAD_BYTES,
    "vllm:kv_offload_store_bytes": Signal.OFFLOAD_STORE_BYTES,
    "vllm:kv_offload_load_time": Signal.OFFLOAD_LOAD_SECONDS,
    "vllm:kv_offload_store_time": Signal.OFFLOAD_STORE_SECONDS,
}
FLAT_SIZE = {"vllm:kv_offload_load_size": "load", "vllm:kv_offload_store_size": "store"}
LEGACY = {
    "vllm:kv_offload_total_bytes": (Signal.OFFLOAD_LOAD_BYTES, Signal.OFFLOAD_STORE_BYTES),
    "vllm:kv_offload_total_time": (Signal.OFFLOAD_LOAD_SECONDS, Signal.OFFLOAD_STORE_SECONDS),
}
LEGACY_SIZE = "vllm:kv_offload_size"
COUNTERS = {
    "vllm:kv_offload_allocation_failure": Signal.OFFLOAD_ALLOCATION_FAILURES,
    "vllm:kv_offload_stores_skipped": Signal.OFFLOAD_STORES_SKIPPED,
    "vllm:prefix_cache_queries": Signal.GPU_PREFIX_QUERIES,
    "vllm:prefix_cache_hits": Signal.GPU_PREFIX_HITS,
    "vllm:external_prefix_cache_queries": Signal.EXTERNAL_PREFIX_QUERIES,
    "vllm:external_prefix_cache_hits": Signal.EXTERNAL_PREFIX_HITS,
    "vllm:prompt_tokens": Signal.PROMPT_TOKENS,
}
# Deprecated aliases (0.10 default, 0.11 hidden): used only when the current name is absent.
ALIASES = {
    "vllm:gpu_prefix_cache_queries": "vllm:prefix_cache_queries",
    "vllm:gpu_prefix_cache_hits": "vllm:prefix_cache_hits",
    "vllm:gpu_cache_usage_perc": "vllm:kv_cache_usage_perc",
}
GAUGES = {
    "vllm:kv_cache_usage_perc": Signal.GPU_KV_CACHE_USAGE,
    "vllm:gpu_cache_usage_perc": Signal.GPU_KV_CACHE_USAGE,
    "vllm:kv_offload_cpu_cache_usage_perc": Signal.OFFLOAD_INFLIGHT,
    "vllm:num_requests_running": Signal.REQUESTS_RUNNING,
    "vllm:num_requests_waiting": Signal.REQUESTS_WAITING,
}
TTFT = "vllm:time_to_first_token_seconds"
BY_SOURCE = "vllm:prompt_tokens_by_source"
CACHE_INFO = "vllm:cache_config_info"
OFFLOAD_INFO = "vllm:kv_offload_config_info"
# Per-request prefill histograms (0.26+): only their `_sum` is kept, as a counter (the payback's cost per token).
PREFILL = {
    "vllm:request_prefill_time_seconds": Signal.PREFILL_SECONDS,
    "vllm:request_prefill_kv_computed_tokens": Signal.PREFILL_COMPUTED_TOKENS,
}

LOOKUP_DELAY = "vllm:kv_offload_lookup_async_delay_seconds"
QUEUE_TIME = "vllm:request_queue_time_seconds"
FETCH_STAGE = "vllm:num_requests_kv_fetch_by_stage"

FAMILIES = tuple(
    sorted(
        {
            *FLAT,
            *FLAT_SIZE,
            *LEGACY,
            LEGACY_SIZE,
            *COUNTERS,
            *PREFILL,
            *ALIASES,
            *GAUGES,
            TTFT,
            BY_SOURCE,
            CACHE_INFO,
            OFFLOAD_INFO,
            LOOKUP_DELAY,
            QUEUE_TIME,
            FETCH_STAGE,
        }
    )
)
FAMILY_SET = frozenset(FAMILIES)
HISTOGRAMS = frozenset(f for f in FAMILIES if f in _TYPED_HISTOGRAMS)

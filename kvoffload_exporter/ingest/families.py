"""The one table of families the exporter reads from a vLLM body (and a backend's own endpoint joined
to it): each family once, by canonical name (`vllm:` prefix, no `_total`), with its type.

Two readers give the families meaning: `normalise` maps some to logical signals, the backend tables
(`kvoffload_exporter.ingest.backends`) map some to evidence; several are read by both. The selector that picks lines
out of a body is computed from this table alone, so each sample is matched once and handed to every
reader that declares its family. Adding a family: a row here, then its meaning in one reader (a test
checks that every family a reader names is here, typed as that reader reads it, and none is unread).
"""

from __future__ import annotations

from enum import StrEnum


class FamilyType(StrEnum):
    """How a family is read: histograms by `_bucket`/`_sum`/`_count`, the others by their own name."""

    COUNTER = "counter"
    GAUGE = "gauge"
    HISTOGRAM = "histogram"
    INFO = "info"


T = FamilyType

TABLE: dict[str, FamilyType] = {
    # vLLM core (normalise: signals)
    "vllm:cache_config_info": T.INFO,
    "vllm:gpu_cache_usage_perc": T.GAUGE,
    "vllm:gpu_prefix_cache_hits": T.COUNTER,
    "vllm:gpu_prefix_cache_queries": T.COUNTER,
    "vllm:kv_cache_usage_perc": T.GAUGE,
    "vllm:kv_offload_load_size": T.HISTOGRAM,
    "vllm:kv_offload_load_time": T.COUNTER,
    "vllm:kv_offload_lookup_async_delay_seconds": T.HISTOGRAM,
    "vllm:kv_offload_size": T.HISTOGRAM,
    "vllm:kv_offload_store_size": T.HISTOGRAM,
    "vllm:kv_offload_store_time": T.COUNTER,
    "vllm:kv_offload_stores_skipped": T.COUNTER,
    "vllm:kv_offload_total_time": T.COUNTER,
    "vllm:num_requests_running": T.GAUGE,
    "vllm:num_requests_waiting": T.GAUGE,
    "vllm:prefix_cache_hits": T.COUNTER,
    "vllm:prefix_cache_queries": T.COUNTER,
    "vllm:prompt_tokens": T.COUNTER,
    "vllm:prompt_tokens_by_source": T.COUNTER,
    "vllm:request_prefill_kv_computed_tokens": T.HISTOGRAM,
    "vllm:request_prefill_time_seconds": T.HISTOGRAM,
    "vllm:request_queue_time_seconds": T.HISTOGRAM,
    "vllm:time_to_first_token_seconds": T.HISTOGRAM,
    # vLLM, read as signals and as evidence
    "vllm:external_prefix_cache_hits": T.COUNTER,
    "vllm:external_prefix_cache_queries": T.COUNTER,
    "vllm:kv_offload_allocation_failure": T.COUNTER,
    "vllm:kv_offload_config_info": T.INFO,
    "vllm:kv_offload_cpu_cache_usage_perc": T.GAUGE,
    "vllm:kv_offload_load_bytes": T.COUNTER,
    "vllm:kv_offload_store_bytes": T.COUNTER,
    "vllm:kv_offload_total_bytes": T.COUNTER,
    "vllm:num_requests_kv_fetch_by_stage": T.GAUGE,
    # vLLM, evidence only (backend tables)
    "vllm:kv_offload_allocation_failure_sharedstorage": T.COUNTER,
    "vllm:kv_offload_cpu_cache_write_usage_perc": T.GAUGE,
    "vllm:kv_offload_load_bytes_sharedstorage": T.COUNTER,
    "vllm:kv_offload_sharedstorage_total_bytes_sharedstorage": T.COUNTER,
    "vllm:kv_offload_store_bytes_sharedstorage": T.COUNTER,
    "vllm:kv_offload_tiering_active_cascade_jobs": T.GAUGE,
    "vllm:kv_offload_tiering_active_promotion_jobs": T.GAUGE,
    "vllm:kv_offload_tiering_backpressure_blocks_dropped": T.COUNTER,
    "vllm:kv_offload_tiering_backpressure_stores_dropped": T.COUNTER,
    "vllm:kv_offload_tiering_chunk_hits": T.COUNTER,
    "vllm:kv_offload_tiering_chunk_queries": T.COUNTER,
    "vllm:kv_offload_tiering_promotion_allocation_failures": T.COUNTER,
    "vllm:kv_offload_tiering_promotion_latency_seconds": T.HISTOGRAM,
    "vllm:kv_offload_tiering_read_bytes": T.COUNTER,
    "vllm:kv_offload_tiering_write_bytes": T.COUNTER,
    "vllm:llmd_fs_metadata_cache_lookup_blocks": T.COUNTER,
    "vllm:lmcache_mp_lookup_duration_seconds": T.HISTOGRAM,
    "vllm:prompt_tokens_cached_by_source": T.COUNTER,
    "vllm:simple_kv_offload_info": T.INFO,
    "vllm:simple_kv_offload_load_blocks": T.COUNTER,
    "vllm:simple_kv_offload_pending_store_blocks": T.GAUGE,
    "vllm:simple_kv_offload_save_outcomes": T.COUNTER,
    "vllm:simple_kv_offload_used_blocks": T.GAUGE,
    # backends' own endpoints (evidence only)
    "kvbm_matched_tokens": T.COUNTER,
    "kvbm_offload_blocks_d2d": T.COUNTER,
    "kvbm_offload_blocks_d2h": T.COUNTER,
    "kvbm_offload_blocks_d2o": T.COUNTER,
    "kvbm_offload_blocks_h2d": T.COUNTER,
    "kvbm_onboard_blocks_d2d": T.COUNTER,
    "kvbm_onboard_blocks_h2d": T.COUNTER,
    "kvbm_onboard_blocks_o2d": T.COUNTER,
    "lmcache:local_cache_usage": T.GAUGE,
    "lmcache:num_hit_tokens": T.COUNTER,
    "lmcache:num_lookup_hits": T.COUNTER,
    "lmcache:num_lookup_tokens": T.COUNTER,
    "lmcache:num_stored_tokens": T.COUNTER,
    "lmcache_mp_l1_read_chunks": T.COUNTER,
    "lmcache_mp_l1_write_chunks": T.COUNTER,
    "lmcache_mp_lookup_hit_tokens": T.COUNTER,
    "lmcache_mp_lookup_requested_tokens": T.COUNTER,
}

HISTOGRAMS: frozenset[str] = frozenset(f for f, t in TABLE.items() if t is FamilyType.HISTOGRAM)

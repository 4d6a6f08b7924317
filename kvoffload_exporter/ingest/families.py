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

VLLM_RELEASES: tuple[str, str] = ("0.10", "0.34")
"""The oldest and newest vLLM release whose families this table and the backend tables are checked against
(reconstructed expositions from 0.10, the newest wheel on the package index); the README's range."""

PREFIX = "vllm:"
"""vLLM's family prefix, the canonical one every family of this table is named with."""
SPELLINGS: tuple[str, ...] = (PREFIX, "vllm_", "ray_vllm_")
"""Where vLLM's families arrive under another name, in the order a body's spellings are preferred:
vLLM's own `vllm:`; `vllm_` from OpenTelemetry and managed-Prometheus pipelines and prometheus_client's
underscore escaping; `ray_vllm_` from Ray Serve LLM (with `ReplicaId` / `WorkerId` labels). A family is
read in one spelling per body, never two added (kvoffload_exporter.ingest.spellread)."""
ESCAPED = SPELLINGS[1]
NATIVE_NAMESPACES: tuple[str, ...] = (ESCAPED + "llmd_",)
"""Name prefixes a plugin registers in the escaped spelling itself (llm-d's fs backend): its families are
read so spelled in every body, and a line of one is no sign that the body is escaped."""


def canonical(name: str) -> str:
    """A sample or family name as this table names it: any vLLM spelling as `vllm:`, no `_total`."""
    for alt in SPELLINGS[1:]:
        if name.startswith(alt):
            name = PREFIX + name[len(alt) :]
            break
    return name[:-6] if name.endswith("_total") else name


def spelled(family: str, spelling: str) -> str:
    """`family` (canonical) as a body in `spelling` names it; a plugin's own spelling and other
    prefixes (`lmcache:`, `kvbm_`) as they are."""
    if not family.startswith(PREFIX):
        return family
    name = family[len(PREFIX) :]
    return ESCAPED + name if (ESCAPED + name).startswith(NATIVE_NAMESPACES) else spelling + name


OFFLOAD_PREFIX = "vllm:kv_offload_"
"""The OffloadingConnector's families: registered only with a connector, so 0 when absent for an engine."""


class Vllm:
    """The vLLM families the signal readers name (`signalmap`, `routes`, `normalise`, `derive.reasons`): each
    spelled here once and referred to by symbol everywhere else (a test forbids the literal elsewhere). A
    family renamed by a new vLLM: the new name here and in the table, the old one as a row of the table and
    of `ALIASES`; readers need no code for it, whatever its type."""

    CACHE_CONFIG_INFO = "vllm:cache_config_info"
    GPU_CACHE_USAGE_PERC = "vllm:gpu_cache_usage_perc"
    GPU_PREFIX_CACHE_HITS = "vllm:gpu_prefix_cache_hits"
    GPU_PREFIX_CACHE_QUERIES = "vllm:gpu_prefix_cache_queries"
    KV_CACHE_USAGE_PERC = "vllm:kv_cache_usage_perc"
    HISPARSE_CACHE_HITS = "vllm:hisparse_cache_hits"
    HISPARSE_CACHE_MISSES = "vllm:hisparse_cache_misses"
    HISPARSE_HOST_TO_DEVICE_BYTES = "vllm:hisparse_host_to_device_bytes"
    MOONCAKE_BYTES_TRANSFERRED = "vllm:mooncake_bytes_transferred"
    MOONCAKE_NUM_FAILED_TRANSFERS = "vllm:mooncake_num_failed_transfers"
    KV_OFFLOAD_LOAD_SIZE = "vllm:kv_offload_load_size"
    KV_OFFLOAD_LOAD_TIME = "vllm:kv_offload_load_time"
    KV_OFFLOAD_LOOKUP_ASYNC_DELAY_SECONDS = "vllm:kv_offload_lookup_async_delay_seconds"
    KV_OFFLOAD_SIZE = "vllm:kv_offload_size"
    KV_OFFLOAD_STORE_SIZE = "vllm:kv_offload_store_size"
    KV_OFFLOAD_STORE_TIME = "vllm:kv_offload_store_time"
    KV_OFFLOAD_STORES_SKIPPED = "vllm:kv_offload_stores_skipped"
    KV_OFFLOAD_TOTAL_TIME = "vllm:kv_offload_total_time"
    NUM_REQUESTS_RUNNING = "vllm:num_requests_running"
    NUM_REQUESTS_WAITING = "vllm:num_requests_waiting"
    PREFIX_CACHE_HITS = "vllm:prefix_cache_hits"
    PREFIX_CACHE_QUERIES = "vllm:prefix_cache_queries"
    PROMPT_TOKENS = "vllm:prompt_tokens"
    PROMPT_TOKENS_BY_SOURCE = "vllm:prompt_tokens_by_source"
    REQUEST_PREFILL_KV_COMPUTED_TOKENS = "vllm:request_prefill_kv_computed_tokens"
    REQUEST_PREFILL_TIME_SECONDS = "vllm:request_prefill_time_seconds"
    REQUEST_QUEUE_TIME_SECONDS = "vllm:request_queue_time_seconds"
    TIME_TO_FIRST_TOKEN_SECONDS = "vllm:time_to_first_token_seconds"
    EXTERNAL_PREFIX_CACHE_HITS = "vllm:external_prefix_cache_hits"
    EXTERNAL_PREFIX_CACHE_QUERIES = "vllm:external_prefix_cache_queries"
    KV_OFFLOAD_ALLOCATION_FAILURE = "vllm:kv_offload_allocation_failure"
    KV_OFFLOAD_CONFIG_INFO = "vllm:kv_offload_config_info"
    KV_OFFLOAD_CPU_CACHE_USAGE_PERC = "vllm:kv_offload_cpu_cache_usage_perc"
    KV_OFFLOAD_LOAD_BYTES = "vllm:kv_offload_load_bytes"
    KV_OFFLOAD_STORE_BYTES = "vllm:kv_offload_store_bytes"
    KV_OFFLOAD_TOTAL_BYTES = "vllm:kv_offload_total_bytes"
    NUM_REQUESTS_KV_FETCH_BY_STAGE = "vllm:num_requests_kv_fetch_by_stage"


ALIASES: dict[str, str] = {
    Vllm.GPU_PREFIX_CACHE_QUERIES: Vllm.PREFIX_CACHE_QUERIES,
    Vllm.GPU_PREFIX_CACHE_HITS: Vllm.PREFIX_CACHE_HITS,
    Vllm.GPU_CACHE_USAGE_PERC: Vllm.KV_CACHE_USAGE_PERC,
}
"""Deprecated (or renamed) family -> its current family, of any type (counter, gauge, histogram, info): read
as the current family when that one is absent from the scrape (0.10 default, 0.11 hidden). Kept beside the
members so that a family renamed by a new vLLM is one file of the readers: the member takes the new name,
the old one becomes a row here and of the table below (`signalmap` and `normalise` read it from here)."""


TABLE: dict[str, FamilyType] = {
    # vLLM core (normalise: signals)
    Vllm.CACHE_CONFIG_INFO: T.INFO,
    Vllm.GPU_CACHE_USAGE_PERC: T.GAUGE,
    Vllm.GPU_PREFIX_CACHE_HITS: T.COUNTER,
    Vllm.GPU_PREFIX_CACHE_QUERIES: T.COUNTER,
    Vllm.KV_CACHE_USAGE_PERC: T.GAUGE,
    # KV transfers between instances (Mooncake P2P) and HiSparse pages (normalise: signals; never offload evidence)
    Vllm.HISPARSE_CACHE_HITS: T.COUNTER,
    Vllm.HISPARSE_CACHE_MISSES: T.COUNTER,
    Vllm.HISPARSE_HOST_TO_DEVICE_BYTES: T.COUNTER,
    Vllm.MOONCAKE_BYTES_TRANSFERRED: T.HISTOGRAM,  # bytes per transfer: its `_sum` is the bytes moved
    Vllm.MOONCAKE_NUM_FAILED_TRANSFERS: T.COUNTER,
    Vllm.KV_OFFLOAD_LOAD_SIZE: T.HISTOGRAM,
    Vllm.KV_OFFLOAD_LOAD_TIME: T.COUNTER,
    Vllm.KV_OFFLOAD_LOOKUP_ASYNC_DELAY_SECONDS: T.HISTOGRAM,
    Vllm.KV_OFFLOAD_SIZE: T.HISTOGRAM,
    Vllm.KV_OFFLOAD_STORE_SIZE: T.HISTOGRAM,
    Vllm.KV_OFFLOAD_STORE_TIME: T.COUNTER,
    Vllm.KV_OFFLOAD_STORES_SKIPPED: T.COUNTER,
    Vllm.KV_OFFLOAD_TOTAL_TIME: T.COUNTER,
    Vllm.NUM_REQUESTS_RUNNING: T.GAUGE,
    Vllm.NUM_REQUESTS_WAITING: T.GAUGE,
    Vllm.PREFIX_CACHE_HITS: T.COUNTER,
    Vllm.PREFIX_CACHE_QUERIES: T.COUNTER,
    Vllm.PROMPT_TOKENS: T.COUNTER,
    Vllm.PROMPT_TOKENS_BY_SOURCE: T.COUNTER,
    Vllm.REQUEST_PREFILL_KV_COMPUTED_TOKENS: T.HISTOGRAM,
    Vllm.REQUEST_PREFILL_TIME_SECONDS: T.HISTOGRAM,
    Vllm.REQUEST_QUEUE_TIME_SECONDS: T.HISTOGRAM,
    Vllm.TIME_TO_FIRST_TOKEN_SECONDS: T.HISTOGRAM,
    # vLLM, read as signals and as evidence
    Vllm.EXTERNAL_PREFIX_CACHE_HITS: T.COUNTER,
    Vllm.EXTERNAL_PREFIX_CACHE_QUERIES: T.COUNTER,
    Vllm.KV_OFFLOAD_ALLOCATION_FAILURE: T.COUNTER,
    Vllm.KV_OFFLOAD_CONFIG_INFO: T.INFO,
    Vllm.KV_OFFLOAD_CPU_CACHE_USAGE_PERC: T.GAUGE,
    Vllm.KV_OFFLOAD_LOAD_BYTES: T.COUNTER,
    Vllm.KV_OFFLOAD_STORE_BYTES: T.COUNTER,
    Vllm.KV_OFFLOAD_TOTAL_BYTES: T.COUNTER,
    Vllm.NUM_REQUESTS_KV_FETCH_BY_STAGE: T.GAUGE,
    # vLLM, evidence only (backend tables)
    "vllm:kv_offload_allocation_failure_sharedstorage": T.COUNTER,
    "vllm:kv_offload_cpu_cache_write_usage_perc": T.GAUGE,
    "vllm:kv_offload_load_bytes_sharedstorage": T.COUNTER,
    "vllm:kv_offload_store_bytes_sharedstorage": T.COUNTER,
    "vllm:kv_offload_total_bytes_sharedstorage": T.COUNTER,
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
    "vllm:kv_offload_tiering_promotion_job_failures": T.COUNTER,
    "vllm:kv_offload_tiering_cascade_job_failures": T.COUNTER,
    "vllm:kv_offload_tiering_deferred_release_chunks": T.GAUGE,
    "vllm:kv_offload_tiering_deferred_release_hold_seconds": T.HISTOGRAM,
    "vllm:kv_offload_tiering_primary_write_usage_perc": T.GAUGE,
    "vllm:kv_offload_tiering_primary_read_usage_perc": T.GAUGE,
    "vllm:kv_offload_tiering_read_time": T.COUNTER,
    "vllm:kv_offload_tiering_write_time": T.COUNTER,
    "vllm:mooncake_store_operation_failed_keys": T.COUNTER,
    "vllm:mooncake_store_operation_time_seconds": T.HISTOGRAM,
    "vllm:nixl_num_failed_transfers": T.COUNTER,
    "vllm:nixl_num_failed_notifications": T.COUNTER,
    "vllm:nixl_num_kv_expired_reqs": T.COUNTER,
    "vllm:nixl_num_notifications_after_expiry": T.COUNTER,
    "vllm:corrupted_requests": T.COUNTER,
    "vllm:kv_block_lifetime_seconds": T.HISTOGRAM,
    "vllm:kv_block_idle_before_evict_seconds": T.HISTOGRAM,
    "vllm:kv_block_reuse_gap_seconds": T.HISTOGRAM,
    "vllm:llmd_fs_metadata_cache_lookup_blocks": T.COUNTER,
    "vllm:mooncake_store_operation": T.COUNTER,
    "vllm:mooncake_store_operation_bytes": T.COUNTER,
    "vllm:umbp_transfer_bytes": T.COUNTER,
    "vllm:umbp_transfer_failed": T.COUNTER,
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

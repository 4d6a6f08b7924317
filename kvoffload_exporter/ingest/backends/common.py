"""vLLM-side rows every backend shares: which tier served the hit, requests waiting on KV loads, and the
external-prefix counters that are the fallback hit/lookup signal where a backend has no own one."""

from __future__ import annotations

from kvoffload_exporter.ingest.backends.schema import Evidence, Kind, NativeUnit, Source

E, U = Evidence, NativeUnit
BY_SOURCE = "vllm:prompt_tokens_cached_by_source_total"
EXT_QUERIES = "vllm:external_prefix_cache_queries_total"
EXT_HITS = "vllm:external_prefix_cache_hits_total"
KV_FETCH = "vllm:num_requests_kv_fetch_by_stage"


def by_source(source: str, *, tier: str = "", connector: str = "", group: str = "") -> Source:
    """A hit row from cached_by_source (0.32+): the preferred "which tier served it" signal."""
    return Source(BY_SOURCE, E.HITS, U.TOKENS, match=(("source", source),), tier=tier, connector=connector, group=group)


def ext_queries(group: str = "lookups_tokens") -> Source:
    return Source(EXT_QUERIES, E.LOOKUPS, U.TOKENS, group=group)


def ext_hits(group: str = "hits_tokens") -> Source:
    return Source(EXT_HITS, E.HITS, U.TOKENS, group=group)


SHARED: tuple[Source, ...] = (
    # All sources, device included: a breakdown of where cached tokens came from, never added to hits.
    Source(BY_SOURCE, E.SERVED_BY, U.TOKENS, detail_label="source"),
    Source(KV_FETCH, E.KV_FETCH, U.REQUESTS, kind=Kind.GAUGE, detail_label="stage"),
    Source(KV_FETCH, E.IN_FLIGHT, U.REQUESTS, kind=Kind.GAUGE, match=(("stage", "in_progress"),)),
)
"""Rows added whenever any backend is present."""


def _failure(name: str, kind: str, connector: str, signal: Evidence = E.TRANSFER_FAILED) -> Source:
    return Source(name, signal, U.EVENTS, connector=connector, detail=kind)


ALWAYS: tuple[Source, ...] = (
    # NIXL (vllm 0.34.0 distributed/kv_transfer/kv_connector/v1/nixl/stats.py:243-283): failed_notification is
    # also inside failed_transfer ("Retained for compatibility"): kinds are never added together.
    _failure("vllm:nixl_num_failed_transfers_total", "failed_transfer", "nixl"),
    _failure("vllm:nixl_num_failed_notifications_total", "failed_notification", "nixl"),
    _failure("vllm:nixl_num_kv_expired_reqs_total", "kv_expired", "nixl"),
    # Integrity: "the KV blocks may have been reused before the transfer finished" (nixl/stats.py:276-283),
    # and requests with NaNs in their logits (v1/metrics/loggers.py:629-640, only with
    # VLLM_COMPUTE_NANS_IN_LOGITS=1).
    _failure("vllm:nixl_num_notifications_after_expiry_total", "notification_after_expiry", "", E.INTEGRITY),
    _failure("vllm:corrupted_requests_total", "nan_logits", "", E.INTEGRITY),
    # Measured GPU block residency, only with --kv-cache-metrics, sampled (v1/metrics/loggers.py:1038-1080;
    # real H200 capture tests/fixtures/h200-multiprocess/kvm_*): the measured side of the modelled
    # kvoffload_tier_retention_seconds (the canary's wait ladder, about the offload tier).
    *(
        Source(f"vllm:kv_block_{kind}_seconds", signal, unit, suffix=part, detail=kind)
        for kind in ("lifetime", "idle_before_evict", "reuse_gap")
        for signal, unit, part in (
            (E.RESIDENCY_SECONDS, U.SECONDS, "sum"),
            (E.RESIDENCY_SAMPLES, U.BLOCKS_SAMPLED, "count"),
        )
    ),
)
"""Rows read whether or not an offload backend is present: a P/D deployment has KV transfers and no tier."""

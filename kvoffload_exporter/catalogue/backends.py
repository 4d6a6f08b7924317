"""Offload evidence across backends, in each backend's native unit (kvoffload_exporter.ingest.backends): one row per
logical signal, the unit carried as a label. Sum over `tier` and `connector` is safe (disjoint), over
`unit` never; cascades and promotions are breakdowns with their own names, never part of stored/loaded."""

from __future__ import annotations

from kvoffload_exporter.catalogue.metric import ENGINE, Metric
from kvoffload_exporter.enums import Group, MetricType, Unit
from kvoffload_exporter.ingest.backends.schema import Evidence

EV = (*ENGINE, "unit", "tier", "connector")
_SRC = "kvoffload_exporter.ingest.backends tables (see kvoffload_source_metric_info)"


def _row(name: str, kind: MetricType, text: str, labels: tuple[str, ...] = EV, unit: Unit = Unit.NONE) -> Metric:
    return Metric(name=name, type=kind, help=text, labels=labels, unit=unit, source=_SRC, group=Group.ENGINE)


C, G = MetricType.COUNTER, MetricType.GAUGE
METRICS: tuple[Metric, ...] = (
    Metric(
        name="kvoffload_source_metric_info",
        type=MetricType.INFO,
        help="Which upstream series each offload evidence signal of the target is read from, and its native unit "
        "(bytes, tokens, blocks, chunks, ...).",
        labels=("target", "signal", "resolved_name", "unit"),
        source="kvoffload_exporter.ingest.backends",
        group=Group.ENGINE,
    ),
    Metric(
        name="kvoffload_offload_backend_info",
        type=MetricType.INFO,
        help="Offload backends whose families the target exposes (native, tiering, simplecpu, multiconnector, "
        "lmcache, lmcache_mp, kvbm, mooncake_store, umbp).",
        labels=("target", "backend"),
        source="kvoffload_exporter.ingest.backends",
        group=Group.ENGINE,
    ),
    _row("kvoffload_offload_stored_total", C, "KV stored from the GPU into an offload tier, in the backend's unit."),
    _row("kvoffload_offload_loaded_total", C, "KV loaded from an offload tier into the GPU, in the backend's unit."),
    _row("kvoffload_offload_lookups_total", C, "Offload-tier lookups, in the backend's unit (tokens, chunks, blocks)."),
    _row(
        "kvoffload_offload_hits_total", C, "Offload-tier lookup hits, in the backend's unit (tokens, chunks, blocks)."
    ),
    _row(
        "kvoffload_offload_dropped_total",
        C,
        "Offload writes or promotions dropped, by closed reason (cpu_full, request_gone, null_block, not_hashed, "
        "backpressure, allocation_failure, promotion_allocation_failure), in the backend's unit.",
        (*EV, "reason"),
    ),
    _row(
        "kvoffload_offload_cascaded_total",
        C,
        "KV written from an upper tier down into this tier (tiering cascade, KVBM host to disk): a breakdown, "
        "not a GPU store.",
    ),
    _row(
        "kvoffload_offload_promoted_total",
        C,
        "KV read from this tier up into the primary tier (tiering promotion): a breakdown, not a GPU load.",
    ),
    _row("kvoffload_offload_capacity", G, "Configured offload-tier capacity in the backend's unit."),
    _row("kvoffload_offload_in_flight", G, "Offload work in flight (pending blocks, active jobs, requests, ratio)."),
    _row("kvoffload_offload_used", G, "Offload-tier space in use as the backend reports it (not fill level for all)."),
    Metric(
        name="kvoffload_offload_unit_bytes",
        type=MetricType.GAUGE,
        help="Bytes per native unit where the exposition gives the factor; basis names it (SimpleCPU blocks: "
        "kv_offloading_size/capacity_blocks, approximate; chunks: cpu_kv_cache_size_bytes/cpu_num_chunks).",
        labels=(*ENGINE, "unit", "basis"),
        unit=Unit.BYTES,
        source="vllm:cache_config_info, vllm:simple_kv_offload_info, vllm:kv_offload_config_info",
        group=Group.ENGINE,
    ),
    Metric(
        name="kvoffload_tier_promotion_seconds_total",
        type=MetricType.COUNTER,
        help="Summed latency of tier promotions (histogram sum), by tier and result (vLLM 0.33+).",
        labels=(*ENGINE, "tier", "result"),
        unit=Unit.SECONDS,
        source="vllm:kv_offload_tiering_promotion_latency_seconds_sum",
        group=Group.ENGINE,
    ),
    Metric(
        name="kvoffload_tier_promotions_total",
        type=MetricType.COUNTER,
        help="Tier promotions (histogram count), by tier and result (vLLM 0.33+).",
        labels=(*ENGINE, "tier", "result"),
        source="vllm:kv_offload_tiering_promotion_latency_seconds_count",
        group=Group.ENGINE,
    ),
    Metric(
        name="kvoffload_prompt_tokens_cached_by_source_total",
        type=MetricType.COUNTER,
        help="Cached prompt tokens by the tier that served them (device, host, disk, p2p, external_unspecified; "
        "vLLM 0.32+). A breakdown: never add it to the hit counters.",
        labels=(*ENGINE, "source"),
        unit=Unit.TOKENS,
        source="vllm:prompt_tokens_cached_by_source_total",
        group=Group.ENGINE,
    ),
    Metric(
        name="kvoffload_requests_kv_fetch",
        type=MetricType.GAUGE,
        help="Waiting requests by async KV-load stage (waiting_to_start, in_progress, completed_waiting; 0.32+).",
        labels=(*ENGINE, "stage"),
        source="vllm:num_requests_kv_fetch_by_stage",
        group=Group.ENGINE,
    ),
)

EVIDENCE_METRICS: dict[Evidence, str] = {
    Evidence.STORED: "kvoffload_offload_stored_total",
    Evidence.LOADED: "kvoffload_offload_loaded_total",
    Evidence.LOOKUPS: "kvoffload_offload_lookups_total",
    Evidence.HITS: "kvoffload_offload_hits_total",
    Evidence.DROPPED: "kvoffload_offload_dropped_total",
    Evidence.CASCADED: "kvoffload_offload_cascaded_total",
    Evidence.PROMOTED: "kvoffload_offload_promoted_total",
    Evidence.CAPACITY: "kvoffload_offload_capacity",
    Evidence.IN_FLIGHT: "kvoffload_offload_in_flight",
    Evidence.USED: "kvoffload_offload_used",
    Evidence.PROMOTION_SECONDS: "kvoffload_tier_promotion_seconds_total",
    Evidence.PROMOTIONS: "kvoffload_tier_promotions_total",
    Evidence.SERVED_BY: "kvoffload_prompt_tokens_cached_by_source_total",
    Evidence.KV_FETCH: "kvoffload_requests_kv_fetch",
}
"""Evidence signal -> the catalogue row the collector writes it under (every signal has one)."""

"""Offload evidence across backends (kvoffload_exporter.ingest.backends): one family per logical signal and
native unit, the unit in the name (`kvoffload_backend_stored_blocks_total`, `..._stored_bytes_total`), so a
value never needs a label to say what it counts. Sum over `tier` and `connector` is safe (disjoint); a sum
across units cannot be written by accident. Cascades and promotions are breakdowns with their own names,
never part of stored/loaded."""

from __future__ import annotations

from kvoffload_exporter.catalogue.metric import ENGINE, Metric
from kvoffload_exporter.enums import Group, MetricType, Unit
from kvoffload_exporter.ingest.backends.resolve import SIGNAL_UNITS
from kvoffload_exporter.ingest.backends.schema import CUMULATIVE, Backend, DropReason, Evidence, NativeUnit

EV = (*ENGINE, "tier", "connector")
_SRC = "kvoffload_exporter.ingest.backends tables (see kvoffload_source_metric_info)"

_HELP: dict[Evidence, str] = {
    Evidence.STORED: "KV stored from the GPU into an offload tier, in {unit}.",
    Evidence.LOADED: "KV loaded from an offload tier into the GPU, in {unit}.",
    Evidence.LOOKUPS: "Offload-tier lookups, in {unit}.",
    Evidence.HITS: "Offload-tier lookup hits, in {unit}.",
    Evidence.DROPPED: "Offload writes or promotions dropped, in {unit}, by closed reason ("
    + ", ".join(DropReason)
    + ").",
    Evidence.CASCADED: "KV written from an upper tier down into this tier (tiering cascade, KVBM host to disk), in "
    "{unit}: a breakdown, not a GPU store.",
    Evidence.PROMOTED: "KV read from this tier up into the primary tier (tiering promotion), in {unit}: a breakdown, "
    "not a GPU load.",
    Evidence.CAPACITY: "Configured offload-tier capacity, in {unit}.",
    Evidence.IN_FLIGHT: "Offload work in flight, in {unit}.",
    Evidence.USED: "Offload-tier space in use as the backend reports it (not fill level for all), in {unit}.",
    Evidence.LOAD_FAILED: "Loads (gets) the offload store answered with an error, whole or in part, in {unit} "
    "(Mooncake store load_get error/partial_failure; the failed keys are recomputed).",
}
"""The signals read in each backend's native unit: one family per (signal, unit) any backend table declares."""

_BASE_UNITS = {NativeUnit.BYTES: Unit.BYTES, NativeUnit.TOKENS: Unit.TOKENS, NativeUnit.RATIO: Unit.RATIO}
SIZED_UNITS: tuple[NativeUnit, ...] = (NativeUnit.BLOCKS, NativeUnit.CHUNKS)
"""Units whose size in bytes the exposition can give (kvoffload_exporter.ingest.backends.resolve.unit_bytes)."""


def evidence_name(signal: Evidence, unit: NativeUnit) -> str:
    """`kvoffload_backend_<signal>_<unit>`, `_total` for counters: the family one evidence series is written under."""
    return f"kvoffload_backend_{signal}_{unit}" + ("_total" if signal in CUMULATIVE else "")


def unit_size_name(unit: NativeUnit) -> str:
    """`kvoffload_backend_block_size_bytes`: bytes per native unit (blocks, chunks)."""
    return f"kvoffload_backend_{str(unit).removesuffix('s')}_size_bytes"


_TIER = "vllm:kv_offload_tiering_"


def _tier_row(name: str, kind: MetricType, text: str, source: str, unit: Unit = Unit.NONE, *extra: str) -> Metric:
    return Metric(
        name=name,
        type=kind,
        help=text,
        labels=(*ENGINE, "tier", *extra),
        unit=unit,
        source=_TIER + source,
        group=Group.ENGINE,
    )


def _tier_rows() -> tuple[Metric, ...]:
    """A tiering spec's secondary tiers (vLLM 0.34.0 vllm/v1/kv_offload/tiering/spec.py:152-270), by tier."""
    c, g = MetricType.COUNTER, MetricType.GAUGE
    return (
        _tier_row(
            "kvoffload_tier_promotion_failures_total",
            c,
            "Failed promotion jobs from this secondary tier into the primary tier: with chunk hits and no load, "
            "state reason promotion_failures.",
            "promotion_job_failures_total",
        ),
        _tier_row(
            "kvoffload_tier_cascade_failures_total",
            c,
            "Failed cascade jobs from the primary tier into this secondary tier (it stores less than offered).",
            "cascade_job_failures_total",
        ),
        _tier_row(
            "kvoffload_tier_deferred_release_chunks",
            g,
            "Primary-tier chunks of failed promotions from this tier held back until its I/O can no longer write "
            "to them (vLLM 0.34, P2P tiers), vLLM's value as is: already inside the CPU write usage, never add it "
            "to any usage or capacity.",
            "deferred_release_chunks",
        ),
        _tier_row(
            "kvoffload_tier_deferred_release_hold_seconds_total",
            c,
            "Summed time failed promotions' primary chunks were held before their deferred release (histogram sum).",
            "deferred_release_hold_seconds_sum",
            Unit.SECONDS,
        ),
        _tier_row(
            "kvoffload_tier_deferred_releases_total",
            c,
            "Completed deferred releases (histogram count); with the hold seconds, the mean hold time.",
            "deferred_release_hold_seconds_count",
        ),
        _tier_row(
            "kvoffload_tier_primary_usage_ratio",
            g,
            "Share of the primary tier used by transfers with this secondary tier, by direction (write: "
            "promotions into the primary, read: cascades out of it).",
            "primary_{write,read}_usage_perc",
            Unit.RATIO,
            "direction",
        ),
        _tier_row(
            "kvoffload_tier_active_jobs",
            g,
            "Active jobs of this secondary tier by kind: promotion (into the primary) or cascade (out of it).",
            "active_{promotion,cascade}_jobs",
            Unit.NONE,
            "kind",
        ),
        _tier_row(
            "kvoffload_tier_transfer_seconds_total",
            c,
            "Time spent reading from (promotions) or writing to (cascades) this secondary tier, by direction; "
            "tiers that do not report per-job time have no series.",
            "{read,write}_time_total",
            Unit.SECONDS,
            "direction",
        ),
    )


def _evidence_rows() -> tuple[Metric, ...]:
    out = []
    for signal, text in _HELP.items():
        for unit in SIGNAL_UNITS[signal]:
            out.append(
                Metric(
                    name=evidence_name(signal, unit),
                    type=MetricType.COUNTER if signal in CUMULATIVE else MetricType.GAUGE,
                    help=text.format(unit=unit),
                    labels=(*EV, "reason") if signal == Evidence.DROPPED else EV,
                    unit=_BASE_UNITS.get(unit, Unit.NONE),
                    source=_SRC,
                    group=Group.ENGINE,
                )
            )
    return tuple(out)


METRICS: tuple[Metric, ...] = (
    Metric(
        name="kvoffload_source_metric_info",
        type=MetricType.INFO,
        help="Which upstream series each offload evidence signal of the target is read from, and its native unit "
        "(bytes, tokens, blocks, chunks, ...): the unit names the kvoffload_backend_* family it is written to.",
        labels=("target", "signal", "resolved_name", "unit"),
        source="kvoffload_exporter.ingest.backends",
        group=Group.ENGINE,
    ),
    Metric(
        name="kvoffload_backend_info",
        type=MetricType.INFO,
        help=f"Offload backends whose families the target exposes ({', '.join(Backend)}).",
        labels=("target", "backend"),
        source="kvoffload_exporter.ingest.backends",
        group=Group.ENGINE,
    ),
    *_evidence_rows(),
    *(
        Metric(
            name=unit_size_name(unit),
            type=MetricType.GAUGE,
            help=f"Bytes per {str(unit).removesuffix('s')} where the exposition gives the factor; basis names it "
            "(SimpleCPU blocks: kv_offloading_size/capacity_blocks, approximate; chunks: "
            "cpu_kv_cache_size_bytes/cpu_num_chunks).",
            labels=(*ENGINE, "basis"),
            unit=Unit.BYTES,
            source="vllm:cache_config_info, vllm:simple_kv_offload_info, vllm:kv_offload_config_info",
            group=Group.ENGINE,
        )
        for unit in SIZED_UNITS
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
    *_tier_rows(),
    Metric(
        name="kvoffload_backend_operation_seconds_total",
        type=MetricType.COUNTER,
        help="Summed latency of an offload store's operations (histogram sum) by operation (Mooncake store: "
        "save_exists, save_put, load_get, lookup_exists, lookup_lease in 0.34).",
        labels=(*ENGINE, "operation"),
        unit=Unit.SECONDS,
        source="vllm:mooncake_store_operation_time_seconds_sum",
        group=Group.ENGINE,
    ),
    Metric(
        name="kvoffload_backend_operations_total",
        type=MetricType.COUNTER,
        help="An offload store's operations (histogram count) by operation; with "
        "kvoffload_backend_operation_seconds_total the mean latency.",
        labels=(*ENGINE, "operation"),
        source="vllm:mooncake_store_operation_time_seconds_count",
        group=Group.ENGINE,
    ),
    Metric(
        name="kvoffload_kv_transfer_events_total",
        type=MetricType.COUNTER,
        help="KV transfer failures between instances by connector and closed kind (NIXL: failed_transfer, "
        "failed_notification - also inside failed_transfer, never add kinds - and kv_expired).",
        labels=(*ENGINE, "connector", "kind"),
        source="vllm:nixl_num_failed_transfers_total, vllm:nixl_num_failed_notifications_total, "
        "vllm:nixl_num_kv_expired_reqs_total",
        group=Group.ENGINE,
    ),
    Metric(
        name="kvoffload_integrity_events_total",
        type=MetricType.COUNTER,
        help="Events that may mean corrupted outputs, by closed kind: nan_logits (requests with NaNs in their "
        "logits, vllm:corrupted_requests, only with VLLM_COMPUTE_NANS_IN_LOGITS=1) and notification_after_expiry "
        "(NIXL: the KV blocks may have been reused before the transfer finished).",
        labels=(*ENGINE, "kind"),
        source="vllm:corrupted_requests_total, vllm:nixl_num_notifications_after_expiry_total",
        group=Group.ENGINE,
    ),
    Metric(
        name="kvoffload_gpu_block_residency_seconds_total",
        type=MetricType.COUNTER,
        help="MEASURED GPU KV block residency (vLLM --kv-cache-metrics, sampled; GPU blocks only), summed seconds "
        "by kind: lifetime (allocation to eviction), idle_before_evict, reuse_gap; with "
        "kvoffload_gpu_block_residency_samples_total the mean. kvoffload_tier_retention_seconds is the MODELLED "
        "side: the canary's wait ladder, for the offload tier.",
        labels=(*ENGINE, "kind"),
        unit=Unit.SECONDS,
        source="vllm:kv_block_{lifetime,idle_before_evict,reuse_gap}_seconds_sum",
        group=Group.ENGINE,
    ),
    Metric(
        name="kvoffload_gpu_block_residency_samples_total",
        type=MetricType.COUNTER,
        help="GPU KV blocks the residency histograms sampled, by kind (histogram count).",
        labels=(*ENGINE, "kind"),
        source="vllm:kv_block_{lifetime,idle_before_evict,reuse_gap}_seconds_count",
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

OTHER_EVIDENCE: dict[Evidence, str] = {
    Evidence.PROMOTION_FAILED: "kvoffload_tier_promotion_failures_total",
    Evidence.CASCADE_FAILED: "kvoffload_tier_cascade_failures_total",
    Evidence.DEFERRED_RELEASE: "kvoffload_tier_deferred_release_chunks",
    Evidence.DEFERRED_RELEASE_SECONDS: "kvoffload_tier_deferred_release_hold_seconds_total",
    Evidence.DEFERRED_RELEASES: "kvoffload_tier_deferred_releases_total",
    Evidence.PRIMARY_USAGE: "kvoffload_tier_primary_usage_ratio",
    Evidence.ACTIVE_JOBS: "kvoffload_tier_active_jobs",
    Evidence.TIER_TRANSFER_SECONDS: "kvoffload_tier_transfer_seconds_total",
    Evidence.OPERATION_SECONDS: "kvoffload_backend_operation_seconds_total",
    Evidence.OPERATIONS: "kvoffload_backend_operations_total",
    Evidence.TRANSFER_FAILED: "kvoffload_kv_transfer_events_total",
    Evidence.INTEGRITY: "kvoffload_integrity_events_total",
    Evidence.RESIDENCY_SECONDS: "kvoffload_gpu_block_residency_seconds_total",
    Evidence.RESIDENCY_SAMPLES: "kvoffload_gpu_block_residency_samples_total",
    Evidence.PROMOTION_SECONDS: "kvoffload_tier_promotion_seconds_total",
    Evidence.PROMOTIONS: "kvoffload_tier_promotions_total",
    Evidence.SERVED_BY: "kvoffload_prompt_tokens_cached_by_source_total",
    Evidence.KV_FETCH: "kvoffload_requests_kv_fetch",
}
"""Evidence signals in one fixed unit, each under its own catalogue row (the rest: `evidence_name`)."""


def evidence_metric(signal: Evidence, unit: NativeUnit) -> str:
    """The catalogue row the collector writes one evidence series under (every signal and unit has one)."""
    return OTHER_EVIDENCE.get(signal) or evidence_name(signal, unit)

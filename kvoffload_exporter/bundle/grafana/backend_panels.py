"""Overview row for the one evidence schema across backends: per tier, in each backend's native unit.

Why separate: these panels read only the backend-neutral `kvoffload_backend_*` families (ingest.backends),
so SimpleCPU blocks, LMCache tokens, KVBM blocks and tiering bytes/chunks all land in the same panels;
each unit has its own family (one query each, listed from the catalogue), so nothing is summed across units.
"""

from __future__ import annotations

from collections.abc import Callable

from kvoffload_exporter.bundle.alerting.promql import Matcher, Query
from kvoffload_exporter.bundle.grafana.panels import Layout, timeseries
from kvoffload_exporter.catalogue import evidence_metric
from kvoffload_exporter.ingest.backends.resolve import SIGNAL_UNITS
from kvoffload_exporter.ingest.backends.schema import Evidence, NativeUnit

RATE_RANGE = "[$__rate_interval]"


def _tiered(expr: str) -> str:
    """Single-tier backends export `tier=""`, which Prometheus drops: name it so every legend label exists."""
    return f'label_replace({expr}, "tier", "single", "tier", "")'


def _per_tier_row(L: Layout, q: Query, eng: str) -> None:
    """Per tier, in each backend's native unit: stored and loaded, drops, promotions."""
    r = RATE_RANGE
    by = "sum by (job, instance, target, model_name, engine, tier, connector)"
    traffic = [
        (
            _tiered(f"{by} (rate({q(evidence_metric(signal, unit))}{r}))"),
            f"{signal} {unit} {{{{tier}}}} {eng}",
        )
        for signal in (Evidence.STORED, Evidence.LOADED)
        for unit in SIGNAL_UNITS[signal]
    ]
    drops = [
        (_tiered(f"rate({q(evidence_metric(Evidence.DROPPED, unit))}{r})"), f"{{{{reason}}}} {{{{tier}}}} {unit} {eng}")
        for unit in SIGNAL_UNITS[Evidence.DROPPED]
    ]
    L.row("Per-tier offload (every backend, native units)")
    L.add(
        timeseries(
            "Stored and loaded by tier",
            "GPU ↔ tier traffic per second in the backend's own unit (bytes for the OffloadingConnector and "
            "tiering, blocks for SimpleCPU and KVBM, tokens for LMCache, chunks for the LMCache MP server). "
            "kvoffload_source_metric_info names the upstream series. Never add across units.",
            traffic,
            "cps",
        ),
        w=12,
        h=8,
    )
    L.add(
        timeseries(
            "Which tier served the hit",
            "Cached prompt tokens per second by the tier that supplied them (vllm:prompt_tokens_cached_by_source, "
            "0.32+): device = GPU prefix cache, host = CPU tier, disk = fs/secondary tier, p2p, "
            "external_unspecified = a connector that does not say (LMCache, KVBM, llm-d).",
            [(f"rate({q('kvoffload_prompt_tokens_cached_by_source_total')}{r})", f"{{{{source}}}} {eng}")],
            "suffix: tokens/s",
            stack=True,
        ),
        w=12,
        h=8,
    )
    L.add(
        timeseries(
            "Cascaded and promoted bytes by tier",
            "Tiering: bytes written down into a secondary tier (cascade primary → fs) and read back up "
            "(promotion fs → primary), per second. Breakdowns of where stored/loaded KV went, not extra "
            "GPU traffic.",
            [
                (
                    f"rate({q(evidence_metric(Evidence.CASCADED, NativeUnit.BYTES))}{r})",
                    f"cascaded {{{{tier}}}} {eng}",
                ),
                (
                    f"rate({q(evidence_metric(Evidence.PROMOTED, NativeUnit.BYTES))}{r})",
                    f"promoted {{{{tier}}}} {eng}",
                ),
            ],
            "Bps",
        ),
        w=8,
        h=8,
    )
    L.add(
        timeseries(
            "Drops by tier and reason",
            "Offload writes dropped per second, by closed reason: backpressure = the secondary tier named by `tier` "
            "is falling behind and sheds cascade writes from the primary (tiering 0.31+; the GPU stores into the "
            "primary go on and the engine's state follows the primary tier), cpu_full / request_gone / null_block "
            "/ not_hashed = SimpleCPU save outcomes, allocation_failure = tier full of in-flight chunks. Alert: "
            "KVOffloadTierDroppingWrites.",
            drops,
            "cps",
        ),
        w=8,
        h=8,
    )
    L.add(
        timeseries(
            "Promotion latency (mean)",
            "Mean time a promotion from a secondary tier to the primary took (vllm:kv_offload_tiering_"
            "promotion_latency_seconds, 0.33+), by tier and result.",
            [
                (
                    f"rate({q('kvoffload_tier_promotion_seconds_total')}{r})"
                    f" / rate({q('kvoffload_tier_promotions_total')}{r})",
                    f"{{{{tier}}}} {{{{result}}}} {eng}",
                )
            ],
            "s",
        ),
        w=8,
        h=8,
    )


def _store_errors_row(L: Layout, q: Query, eng: str) -> None:
    """Puts the Mooncake store answered with an error."""
    r = RATE_RANGE
    errored_puts = evidence_metric(Evidence.DROPPED, NativeUnit.STORES)
    L.row("KV store errors (Mooncake store)")
    L.add(
        timeseries(
            "Store errors",
            "Puts the KV store answered with an error, per second (MooncakeStoreConnector save_put with "
            "status=error, in calls). vLLM still adds an errored put's bytes to its status=error bytes: they are "
            "never counted as stored, so Stored and loaded by tier shows only puts that succeeded. Every put of "
            "a window failing reads not_storing, reason store_errors. Alert: KVOffloadStoreErrors.",
            [
                (
                    f"rate({q(errored_puts, str(Matcher('reason', '=', 'store_error')))}{r})",
                    f"failed puts {eng}",
                )
            ],
            "cps",
        ),
        w=24,
        h=8,
    )


def _transfers_row(L: Layout, q: Query, eng: str) -> None:
    """KV transfers between instances and HiSparse: traffic that is not offload evidence."""
    r = RATE_RANGE
    L.row("KV transfers and HiSparse (not offload evidence)")
    L.add(
        timeseries(
            "KV transfers between instances",
            "KV bytes per second moved to or from another vLLM instance (disaggregated prefill/decode: Mooncake "
            "P2P) and failed transfers per second. A transfer feeds another instance, not a tier this "
            "engine reloads from: never part of stored/loaded.",
            [
                (f"rate({q('kvoffload_kv_transfer_bytes_total')}{r})", f"bytes {eng}"),
                (f"rate({q('kvoffload_kv_transfer_failures_total')}{r})", f"failed transfers {eng}"),
            ],
            "Bps",
        ),
        w=12,
        h=8,
    )
    hits, misses = q("kvoffload_hisparse_cache_hits_total"), q("kvoffload_hisparse_cache_misses_total")
    L.add(
        timeseries(
            "HiSparse host-cache hit ratio",
            "Share of HiSparse's sparse-attention pages found on the GPU: hits / (hits + misses). HiSparse pays "
            "off in decode: read it against TPOT, not TTFT.",
            [(f"rate({hits}{r}) / (rate({hits}{r}) + rate({misses}{r}))", f"hit ratio {eng}")],
            "percentunit",
        ),
        w=6,
        h=8,
    )
    L.add(
        timeseries(
            "HiSparse host → GPU bytes",
            "Bytes per second HiSparse copies from host memory to the GPU for the pages it missed.",
            [(f"rate({q('kvoffload_hisparse_host_to_device_bytes_total')}{r})", f"host → GPU {eng}")],
            "Bps",
        ),
        w=6,
        h=8,
    )


BACKEND_ROWS: tuple[Callable[[Layout, Query, str], None], ...] = (
    _per_tier_row,
    _store_errors_row,
    _transfers_row,
)
"""The backend rows of the overview, top to bottom: one builder each."""


def backend_rows(L: Layout, q: Query, eng: str) -> None:
    """Add the backend rows to the overview layout `L` (imported lazily by dashboards.overview)."""
    for row in BACKEND_ROWS:
        row(L, q, eng)

"""KV moved between vLLM instances (Mooncake P2P) and HiSparse's host-cache pages: per engine, as vLLM counts
them. Neither is offload evidence: a transfer feeds another instance's prefill or decode, not a tier this
engine reloads from, and HiSparse's payoff is read on TPOT (decode), not TTFT. (UMBP's store/load counters
are a pool the engine reads back: offload evidence, kvoffload_exporter.ingest.backends.umbp.)"""

from __future__ import annotations

from kvoffload_exporter.catalogue.metric import ENGINE, Metric
from kvoffload_exporter.enums import Group, MetricType, Signal, Unit

C = MetricType.COUNTER
METRICS: tuple[Metric, ...] = (
    Metric(
        name="kvoffload_kv_transfer_bytes_total",
        type=C,
        help="KV bytes moved to or from another vLLM instance (disaggregated prefill/decode: Mooncake P2P); "
        "not tier evidence.",
        labels=ENGINE,
        unit=Unit.BYTES,
        source="vllm:mooncake_bytes_transferred_sum",
        group=Group.ENGINE,
        signal=Signal.KV_TRANSFER_BYTES,
    ),
    Metric(
        name="kvoffload_kv_transfer_failures_total",
        type=C,
        help="KV transfers to or from another vLLM instance that failed (Mooncake P2P).",
        labels=ENGINE,
        source="vllm:mooncake_num_failed_transfers_total",
        group=Group.ENGINE,
        signal=Signal.KV_TRANSFER_FAILURES,
    ),
    Metric(
        name="kvoffload_hisparse_cache_hits_total",
        type=C,
        help="HiSparse sparse-attention pages found in the GPU page cache (not a prefix hit; payoff on TPOT).",
        labels=ENGINE,
        source="vllm:hisparse_cache_hits_total",
        group=Group.ENGINE,
        signal=Signal.HISPARSE_CACHE_HITS,
    ),
    Metric(
        name="kvoffload_hisparse_cache_misses_total",
        type=C,
        help="HiSparse sparse-attention pages fetched from the host (hit ratio: hits / (hits + misses)).",
        labels=ENGINE,
        source="vllm:hisparse_cache_misses_total",
        group=Group.ENGINE,
        signal=Signal.HISPARSE_CACHE_MISSES,
    ),
    Metric(
        name="kvoffload_hisparse_host_to_device_bytes_total",
        type=C,
        help="Bytes HiSparse copied from host memory to the GPU for missed pages.",
        labels=ENGINE,
        unit=Unit.BYTES,
        source="vllm:hisparse_host_to_device_bytes_total",
        group=Group.ENGINE,
        signal=Signal.HISPARSE_HOST_TO_DEVICE_BYTES,
    ),
)

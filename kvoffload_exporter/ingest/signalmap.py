"""Which vLLM family feeds which logical signal, per generation (0.10 → 0.33): the tables `normalise`
folds samples by. Pure declarations; `kvoffload_exporter.ingest.families` lists the same families with their
types and spells their names (`Vllm`): here they are named by symbol only.
"""

from __future__ import annotations

from kvoffload_exporter.ingest.families import ALIASES, Vllm
from kvoffload_exporter.ingest.families import HISTOGRAMS as _TYPED_HISTOGRAMS
from kvoffload_exporter.ingest.snapshot import Signal

# Canonical family -> counter signal. Order matters only for the alias families below.
FLAT = {
    Vllm.KV_OFFLOAD_LOAD_BYTES: Signal.OFFLOAD_LOAD_BYTES,
    Vllm.KV_OFFLOAD_STORE_BYTES: Signal.OFFLOAD_STORE_BYTES,
    Vllm.KV_OFFLOAD_LOAD_TIME: Signal.OFFLOAD_LOAD_SECONDS,
    Vllm.KV_OFFLOAD_STORE_TIME: Signal.OFFLOAD_STORE_SECONDS,
}
FLAT_SIZE = {Vllm.KV_OFFLOAD_LOAD_SIZE: "load", Vllm.KV_OFFLOAD_STORE_SIZE: "store"}
LEGACY = {
    Vllm.KV_OFFLOAD_TOTAL_BYTES: (Signal.OFFLOAD_LOAD_BYTES, Signal.OFFLOAD_STORE_BYTES),
    Vllm.KV_OFFLOAD_TOTAL_TIME: (Signal.OFFLOAD_LOAD_SECONDS, Signal.OFFLOAD_STORE_SECONDS),
}
LEGACY_SIZE = Vllm.KV_OFFLOAD_SIZE
COUNTERS = {
    Vllm.KV_OFFLOAD_ALLOCATION_FAILURE: Signal.OFFLOAD_ALLOCATION_FAILURES,
    Vllm.KV_OFFLOAD_STORES_SKIPPED: Signal.OFFLOAD_STORES_SKIPPED,
    Vllm.PREFIX_CACHE_QUERIES: Signal.GPU_PREFIX_QUERIES,
    Vllm.PREFIX_CACHE_HITS: Signal.GPU_PREFIX_HITS,
    Vllm.EXTERNAL_PREFIX_CACHE_QUERIES: Signal.EXTERNAL_PREFIX_QUERIES,
    Vllm.EXTERNAL_PREFIX_CACHE_HITS: Signal.EXTERNAL_PREFIX_HITS,
    Vllm.PROMPT_TOKENS: Signal.PROMPT_TOKENS,
    # KV moved between instances (Mooncake P2P): transfer bytes and failures, not tier evidence (UMBP's
    # store/load counters are a pool this engine reads back: evidence, ingest/backends/umbp.py)
    Vllm.MOONCAKE_NUM_FAILED_TRANSFERS: Signal.KV_TRANSFER_FAILURES,
    # HiSparse: host-cache pages hit and missed, bytes copied host → device (its payoff shows in TPOT)
    Vllm.HISPARSE_CACHE_HITS: Signal.HISPARSE_CACHE_HITS,
    Vllm.HISPARSE_CACHE_MISSES: Signal.HISPARSE_CACHE_MISSES,
    Vllm.HISPARSE_HOST_TO_DEVICE_BYTES: Signal.HISPARSE_HOST_TO_DEVICE_BYTES,
}
GAUGES = {
    Vllm.KV_CACHE_USAGE_PERC: Signal.GPU_KV_CACHE_USAGE,
    Vllm.KV_OFFLOAD_CPU_CACHE_USAGE_PERC: Signal.OFFLOAD_INFLIGHT,
    Vllm.NUM_REQUESTS_RUNNING: Signal.REQUESTS_RUNNING,
    Vllm.NUM_REQUESTS_WAITING: Signal.REQUESTS_WAITING,
}
TTFT = Vllm.TIME_TO_FIRST_TOKEN_SECONDS
BY_SOURCE = Vllm.PROMPT_TOKENS_BY_SOURCE
CACHE_INFO = Vllm.CACHE_CONFIG_INFO
OFFLOAD_INFO = Vllm.KV_OFFLOAD_CONFIG_INFO
# Histograms of which only the `_sum` is kept, as a counter: the per-request prefill histograms (0.26+; the
# payback's cost per token) and Mooncake P2P's bytes per transfer (the bytes moved).
PREFILL = {
    Vllm.REQUEST_PREFILL_TIME_SECONDS: Signal.PREFILL_SECONDS,
    Vllm.REQUEST_PREFILL_KV_COMPUTED_TOKENS: Signal.PREFILL_COMPUTED_TOKENS,
    Vllm.MOONCAKE_BYTES_TRANSFERRED: Signal.KV_TRANSFER_BYTES,
}

LOOKUP_DELAY = Vllm.KV_OFFLOAD_LOOKUP_ASYNC_DELAY_SECONDS
QUEUE_TIME = Vllm.REQUEST_QUEUE_TIME_SECONDS
FETCH_STAGE = Vllm.NUM_REQUESTS_KV_FETCH_BY_STAGE

FAMILIES = tuple(
    sorted(
        {
            *FLAT,
            *FLAT_SIZE,
            *LEGACY,
            LEGACY_SIZE,
            *COUNTERS,
            *PREFILL,
            *ALIASES,
            *GAUGES,
            TTFT,
            BY_SOURCE,
            CACHE_INFO,
            OFFLOAD_INFO,
            LOOKUP_DELAY,
            QUEUE_TIME,
            FETCH_STAGE,
        }
    )
)
FAMILY_SET = frozenset(FAMILIES)
HISTOGRAMS = frozenset(f for f in FAMILIES if f in _TYPED_HISTOGRAMS)

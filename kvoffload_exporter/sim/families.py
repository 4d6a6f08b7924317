"""The vLLM families the simulator writes, in vLLM 0.26.0's registration order (connector families first).

Each `Family` row says when vLLM has it (`since`/`until`), its type, HELP, extra labels, whether its
children are pre-created at 0 or appear on first use, and whether it needs the OffloadingConnector.
"""

from __future__ import annotations

from functools import partial

from kvoffload_exporter.sim.engine import CACHED_SOURCES, SOURCES
from kvoffload_exporter.sim.family import Children, Family
from kvoffload_exporter.sim.stats import LabelValues
from kvoffload_exporter.sim.versions import Version


def _lazy(v: Version) -> None:
    return None


def _fixed(*values: str) -> Children:
    return lambda v: tuple((x,) for x in values)


def _finished_reasons(v: Version) -> tuple[LabelValues, ...]:
    reasons = ["stop", "length", "abort"]
    if v >= (0, 13):
        reasons.append("error")
    if v >= (0, 18):
        reasons.append("repetition")
    return tuple((r,) for r in reasons)


def _transfer_types(v: Version) -> tuple[LabelValues, ...] | None:
    # 0.16–0.23 create a direction on first use; 0.24+ pre-create both at 0 per engine.
    return (("CPU_to_GPU",), ("GPU_to_CPU",)) if v >= (0, 24) else None


_C, _G, _H = "counter", "gauge", "histogram"


# A family that exists only with the OffloadingConnector configured.
_offload = partial(Family, needs_connector=True)


_BYTES_HELP = "Histogram of KV offload {} size, in bytes."
_USAGE = (
    "Fraction of CPU KV-cache space currently pinned by in-flight {} that have not yet completed "
    "(0.0 = idle, 1.0 = saturated)."
)
_MFU = " (for Model Flops Utilization calculations)."

FAMILIES: tuple[Family, ...] = (
    _offload(
        "kv_offload_total_bytes",
        _C,
        "Number of bytes offloaded by KV connector",
        ("transfer_type",),
        _transfer_types,
        since=(0, 16),
        generation="legacy",
    ),
    _offload(
        "kv_offload_total_time",
        _C,
        "Total time measured by all KV offloading operations",
        ("transfer_type",),
        _transfer_types,
        since=(0, 16),
        generation="legacy",
    ),
    _offload(
        "kv_offload_size",
        _H,
        "Histogram of KV offload transfer size, in bytes.",
        ("transfer_type",),
        _transfer_types,
        since=(0, 16),
        generation="legacy",
    ),
    _offload(
        "kv_offload_cpu_cache_usage_perc",
        _G,
        "Fraction of CPU KV-cache space currently pinned by active transfers (0.0 = idle, 1.0 = "
        "saturated). Sustained high values indicate transfers (stores or promotions) may be dropped "
        "due to insufficient capacity.",
        children=_lazy,
        since=(0, 24),
    ),
    _offload("kv_offload_cpu_cache_write_usage_perc", _G, _USAGE.format("stores"), children=_lazy, since=(0, 26)),
    _offload("kv_offload_cpu_cache_read_usage_perc", _G, _USAGE.format("loads"), children=_lazy, since=(0, 26)),
    _offload(
        "kv_offload_cpu_allocation_size",
        _H,
        "Histogram of the number of CPU blocks requested by each KV offload prepare_store call.",
        children=_lazy,
        since=(0, 26),
        help_changes=(
            ((0, 32), "Histogram of the number of CPU chunks requested by each KV offload prepare_store call."),
        ),
    ),
    _offload(
        "kv_offload_load_bytes",
        _C,
        "Total bytes loaded from offload storage to GPU.",
        children=_lazy,
        since=(0, 24),
        generation="flat",
    ),
    _offload(
        "kv_offload_load_time",
        _C,
        "Total load time from offload storage to GPU, in seconds.",
        children=_lazy,
        since=(0, 24),
        generation="flat",
    ),
    _offload(
        "kv_offload_load_size",
        _H,
        _BYTES_HELP.format("load operation"),
        children=_lazy,
        since=(0, 24),
        generation="flat",
    ),
    _offload(
        "kv_offload_store_bytes",
        _C,
        "Total bytes stored from GPU to offload storage.",
        children=_lazy,
        since=(0, 24),
        generation="flat",
    ),
    _offload(
        "kv_offload_store_time",
        _C,
        "Total store time from GPU to offload storage, in seconds.",
        children=_lazy,
        since=(0, 24),
        generation="flat",
    ),
    _offload(
        "kv_offload_store_size",
        _H,
        _BYTES_HELP.format("store operation"),
        children=_lazy,
        since=(0, 24),
        generation="flat",
    ),
    _offload(
        "kv_offload_lookup_sync_delay_seconds",
        _H,
        "Histogram of the time spent in a single offload lookup call, in seconds.",
        children=_lazy,
        since=(0, 26),
    ),
    _offload(
        "kv_offload_lookup_async_delay_seconds",
        _H,
        "Histogram of time between a request's offload lookup first deferring and the following lookup "
        "resolving, or request finish, in seconds.",
        children=_lazy,
        since=(0, 26),
    ),
    _offload(
        "kv_offload_allocation_failure",
        _C,
        "Number of KV offload store allocation attempts that failed.",
        children=_lazy,
        since=(0, 26),
    ),
    _offload("kv_offload_config_info", "info", "Information of the KV offloading configuration", since=(0, 33)),
    # Seen first in 0.26.0; earlier presence not verified.
    Family(
        "estimated_flops_per_gpu", _C, "Estimated number of floating point operations per GPU" + _MFU, since=(0, 26)
    ),
    Family(
        "estimated_read_bytes_per_gpu", _C, "Estimated number of bytes read from memory per GPU" + _MFU, since=(0, 26)
    ),
    Family(
        "estimated_write_bytes_per_gpu", _C, "Estimated number of bytes written to memory per GPU" + _MFU, since=(0, 26)
    ),
    Family("num_requests_running", _G, "Number of requests in model execution batches."),
    Family("num_requests_waiting", _G, "Number of requests waiting to be processed."),
    Family(
        "num_requests_waiting_by_reason",
        _G,
        "Number of waiting requests by reason. Reason labels: 'capacity' = waiting for scheduling "
        "capacity; 'deferred' = deferred by transient constraints (LoRA budget, KV transfer, blocked "
        "status). Sum of all reasons equals vllm:num_requests_waiting.",
        ("reason",),
        _fixed("capacity", "deferred"),
        since=(0, 22),
    ),
    _offload(
        "num_requests_kv_fetch_by_stage",
        _G,
        "Number of waiting requests by async KV load stage. Stage labels: 'waiting_to_start' = needs an "
        "async KV load that has not started; 'in_progress' = load started and not yet reported finished; "
        "'completed_waiting' = load finished, request not running yet.",
        ("stage",),
        _fixed("waiting_to_start", "in_progress", "completed_waiting"),
        since=(0, 32),
    ),
    Family(
        "engine_sleep_state",
        _G,
        "Engine sleep state; awake = 0 means engine is sleeping; awake = 1 means engine is awake; "
        "weights_offloaded = 1 means sleep level 1; discard_all = 1 means sleep level 2.",
        ("sleep_state",),
        _fixed("awake", "weights_offloaded", "discard_all"),
        since=(0, 12),
    ),
    Family(
        "gpu_cache_usage_perc",
        _G,
        "GPU KV-cache usage. 1 means 100 percent usage.DEPRECATED: Use vllm:kv_cache_usage_perc instead.",
        until=(0, 10),
        hidden_until=(0, 11),
    ),
    Family("kv_cache_usage_perc", _G, "KV-cache usage. 1 means 100 percent usage."),
    Family(
        "gpu_prefix_cache_queries",
        _C,
        "GPU prefix cache queries, in terms of number of queried tokens.",
        until=(0, 10),
        hidden_until=(0, 11),
        source="prefix_cache_queries",
    ),
    Family(
        "gpu_prefix_cache_hits",
        _C,
        "GPU prefix cache hits, in terms of number of cached tokens.",
        until=(0, 10),
        hidden_until=(0, 11),
        source="prefix_cache_hits",
    ),
    Family("prefix_cache_queries", _C, "Prefix cache queries, in terms of number of queried tokens."),
    Family("prefix_cache_hits", _C, "Prefix cache hits, in terms of number of cached tokens."),
    Family(
        "external_prefix_cache_queries",
        _C,
        "External prefix cache queries from KV connector cross-instance cache sharing, in terms of number "
        "of queried tokens.",
        since=(0, 12),
    ),
    Family(
        "external_prefix_cache_hits",
        _C,
        "External prefix cache hits from KV connector cross-instance cache sharing, in terms of number of "
        "cached tokens.",
        since=(0, 12),
    ),
    Family("mm_cache_queries", _C, "Multi-modal cache queries, in terms of number of queried items.", since=(0, 26)),
    Family("mm_cache_hits", _C, "Multi-modal cache hits, in terms of number of cached items.", since=(0, 26)),
    Family("num_preemptions", _C, "Cumulative number of preemption from the engine."),
    Family("prompt_tokens", _C, "Number of prefill tokens processed."),
    Family(
        "prompt_tokens_by_source",
        _C,
        "Number of prompt tokens by source.",
        ("source",),
        _fixed(*SOURCES),
        since=(0, 16),
    ),
    Family("prompt_tokens_cached", _C, "Number of cached prompt tokens (local + external).", since=(0, 16)),
    Family(
        "prompt_tokens_recomputed",
        _C,
        "Number of cached tokens recomputed for forward pass.",
        since=(0, 16),
        until=(0, 18),
    ),
    Family(
        "prompt_tokens_cached_by_source",
        _C,
        "Prefix-cache hit tokens by the cache tier that supplied them: device (local HBM), host "
        "(offloaded to DRAM), disk, p2p (transferred from another vLLM instance) or external_unspecified. "
        "Counted at admission; sums to vllm:prefix_cache_hits + vllm:external_prefix_cache_hits.",
        ("source",),
        _fixed(*CACHED_SOURCES),
        since=(0, 32),
    ),
    Family("generation_tokens", _C, "Number of generation tokens processed."),
    Family("request_success", _C, "Count of successfully processed requests.", ("finished_reason",), _finished_reasons),
    Family(
        "admission_rejections",
        _C,
        "Number of admission attempts rejected by a queue limit, by reason.",
        ("reason",),
        _fixed("max_num_queued_reqs", "max_num_queued_tokens"),
        since=(0, 32),
        per_engine=False,
    ),
    Family("request_prompt_tokens", _H, "Number of prefill tokens processed."),
    Family("request_generation_tokens", _H, "Number of generation tokens processed."),
    Family("iteration_tokens_total", _H, "Histogram of number of tokens per engine_step."),
    Family("request_max_num_generation_tokens", _H, "Histogram of maximum number of requested generation tokens."),
    Family("request_params_n", _H, "Histogram of the n request parameter."),
    Family("request_params_max_tokens", _H, "Histogram of the max_tokens request parameter."),
    Family("time_to_first_token_seconds", _H, "Histogram of time to first token in seconds."),
    Family(
        "time_per_output_token_seconds",
        _H,
        "Histogram of time per output token in seconds.DEPRECATED: Use vllm:inter_token_latency_seconds instead.",
        until=(0, 11),
        hidden_until=(0, 13),
    ),
    Family("inter_token_latency_seconds", _H, "Histogram of inter-token latency in seconds."),
    Family(
        "request_time_per_output_token_seconds",
        _H,
        "Histogram of time_per_output_token_seconds per request.",
        since=(0, 11),
    ),
    Family("e2e_request_latency_seconds", _H, "Histogram of e2e request latency in seconds."),
    Family("request_queue_time_seconds", _H, "Histogram of time spent in WAITING phase for request."),
    Family("request_inference_time_seconds", _H, "Histogram of time spent in RUNNING phase for request."),
    Family("request_prefill_time_seconds", _H, "Histogram of time spent in PREFILL phase for request."),
    Family("request_decode_time_seconds", _H, "Histogram of time spent in DECODE phase for request."),
    Family("request_num_preemptions", _H, "Histogram of the number of times a request was preempted.", since=(0, 32)),
    Family(
        "request_prefill_kv_computed_tokens",
        _H,
        "Histogram of new KV tokens computed during prefill (excluding cached tokens).",
        since=(0, 13),
    ),
    Family("cache_config_info", "info", "Information of the LLMEngine CacheConfig"),
)
FAMILY_NAMES = frozenset(f.name for f in FAMILIES)

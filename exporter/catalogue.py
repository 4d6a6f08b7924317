"""The metric catalogue: every name the exporter emits, with type, unit, labels, help and source.

It is the single source of names for the collector, the dashboards, the alert rules and the docs
(`docs/metrics.md` is generated from it). Names follow Prometheus conventions: `kvoffload_` prefix,
base units, `_total` only on counters, no colons.
"""

from __future__ import annotations

from dataclasses import dataclass

PREFIX = "kvoffload_"

ENGINE = ("target", "model_name", "engine")
WINDOWED = ENGINE + ("window",)

STATES = ("not_configured", "idle", "storing", "store_without_load", "hit")
"""Evidence states, in the order they are documented (see derive.evidence_state)."""

SCRAPE_ERROR_REASONS = (
    "timeout",
    "connect",
    "http_status",
    "content_type",
    "too_large",
    "truncated",
    "parse",
    "internal",
)
"""Closed set of reasons for kvoffload_scrape_errors_total; never free text in labels."""

COLLECTORS = ("vllm", "host", "gpu", "canary")

CANARY_PATHS = ("cold", "gpu_hit", "offload_hit", "recompute", "control_target")
CANARY_RESULTS = ("offload_hit", "gpu_hit", "partial", "miss", "error")
CANARY_VERDICTS = ("offload_faster", "offload_slower", "no_offload_hit", "inconclusive")
CANARY_REASONS = ("ok", "no_store", "not_displaced", "no_load", "evicted_from_tier", "loaded_but_slower", "error")
"""Why a canary cycle ended as it did (closed set; see docs/canary.md)."""
CANARY_TIERS = ("gpu", "offload")


@dataclass(frozen=True)
class Metric:
    name: str
    type: str  # counter | gauge | stateset | info
    help: str
    labels: tuple[str, ...] = ()
    unit: str = ""
    source: str = ""  # upstream vLLM family or system call this is derived from
    group: str = "engine"  # docs/dashboards section

    @property
    def prom_type(self) -> str:
        """The TYPE written in the text exposition (statesets and infos are gauges there)."""
        return "counter" if self.type == "counter" else "gauge"


def _m(*args: object, **kw: object) -> Metric:
    return Metric(*args, **kw)  # type: ignore[arg-type]


_METRICS = (
    # --- exporter / target health -------------------------------------------------------------
    _m(
        "kvoffload_up",
        "gauge",
        "1 if the last poll of the vLLM target succeeded, else 0.",
        ("target",),
        source="GET /metrics",
        group="health",
    ),
    _m(
        "kvoffload_target_info",
        "info",
        "Target facts: vLLM version from /version and the offload metric generation seen "
        "(flat, transfer_type or none).",
        ("target", "vllm_version", "generation"),
        source="GET /version, /metrics",
        group="health",
    ),
    _m(
        "kvoffload_scrape_errors_total",
        "counter",
        "Failed polls of a vLLM target by reason (closed set).",
        ("target", "reason"),
        group="health",
    ),
    _m(
        "kvoffload_scrape_duration_seconds",
        "gauge",
        "Duration of the last poll of the target.",
        ("target",),
        "seconds",
        group="health",
    ),
    _m(
        "kvoffload_scrape_body_bytes",
        "gauge",
        "Size of the last /metrics body read from the target.",
        ("target",),
        "bytes",
        group="health",
    ),
    _m(
        "kvoffload_last_success_timestamp_seconds",
        "gauge",
        "Unix time of the last successful poll of the target.",
        ("target",),
        "seconds",
        group="health",
    ),
    _m(
        "kvoffload_collector_success",
        "gauge",
        "1 if the collector's last run succeeded (vllm: every target polled fine).",
        ("collector",),
        group="health",
    ),
    _m(
        "kvoffload_collector_duration_seconds",
        "gauge",
        "Duration of the collector's last run.",
        ("collector",),
        "seconds",
        group="health",
    ),
    _m(
        "kvoffload_exporter_build_info",
        "info",
        "Exporter version and Python version.",
        ("version", "python"),
        group="health",
    ),
    # --- offload traffic (cumulative, de-duplicated across metric generations) ----------------
    _m(
        "kvoffload_offload_load_bytes_total",
        "counter",
        "Bytes loaded from the offload tier into GPU KV cache (one generation only, never both).",
        ENGINE,
        "bytes",
        "vllm:kv_offload_load_bytes_total | vllm:kv_offload_total_bytes_total{transfer_type=CPU_to_GPU}",
    ),
    _m(
        "kvoffload_offload_store_bytes_total",
        "counter",
        "Bytes stored from GPU KV cache into the offload tier (one generation only, never both).",
        ENGINE,
        "bytes",
        "vllm:kv_offload_store_bytes_total | vllm:kv_offload_total_bytes_total{transfer_type=GPU_to_CPU}",
    ),
    _m(
        "kvoffload_offload_load_seconds_total",
        "counter",
        "Transfer seconds of offload loads, summed over workers.",
        ENGINE,
        "seconds",
        "vllm:kv_offload_load_time_total | vllm:kv_offload_total_time_total{transfer_type=CPU_to_GPU}",
    ),
    _m(
        "kvoffload_offload_store_seconds_total",
        "counter",
        "Transfer seconds of offload stores, summed over workers.",
        ENGINE,
        "seconds",
        "vllm:kv_offload_store_time_total | vllm:kv_offload_total_time_total{transfer_type=GPU_to_CPU}",
    ),
    _m(
        "kvoffload_offload_loads_total",
        "counter",
        "Offload load operations (transfer-size histogram count).",
        ENGINE,
        source="vllm:kv_offload_load_size_count",
    ),
    _m(
        "kvoffload_offload_stores_total",
        "counter",
        "Offload store operations (transfer-size histogram count).",
        ENGINE,
        source="vllm:kv_offload_store_size_count",
    ),
    _m(
        "kvoffload_offload_allocation_failures_total",
        "counter",
        "Offload store allocations that failed (tier full of in-flight chunks).",
        ENGINE,
        source="vllm:kv_offload_allocation_failure_total",
    ),
    _m(
        "kvoffload_offload_stores_skipped_total",
        "counter",
        "Stores skipped by reuse gating (store_threshold >= 2).",
        ENGINE,
        source="vllm:kv_offload_stores_skipped_total",
    ),
    _m(
        "kvoffload_gpu_prefix_queries_tokens_total",
        "counter",
        "Prompt tokens looked up in the GPU prefix cache.",
        ENGINE,
        "tokens",
        "vllm:prefix_cache_queries_total | vllm:gpu_prefix_cache_queries_total",
    ),
    _m(
        "kvoffload_gpu_prefix_hits_tokens_total",
        "counter",
        "Prompt tokens served from the GPU prefix cache.",
        ENGINE,
        "tokens",
        "vllm:prefix_cache_hits_total | vllm:gpu_prefix_cache_hits_total",
    ),
    _m(
        "kvoffload_external_prefix_queries_tokens_total",
        "counter",
        "Prompt tokens looked up in the external (offload/connector) cache.",
        ENGINE,
        "tokens",
        "vllm:external_prefix_cache_queries_total",
    ),
    _m(
        "kvoffload_external_prefix_hits_tokens_total",
        "counter",
        "Prompt tokens served from the external (offload/connector) cache.",
        ENGINE,
        "tokens",
        "vllm:external_prefix_cache_hits_total",
    ),
    _m(
        "kvoffload_prompt_tokens_by_source_total",
        "counter",
        "Prompt tokens by where their KV came from (local_compute, local_cache_hit, external_kv_transfer).",
        ENGINE + ("source",),
        "tokens",
        "vllm:prompt_tokens_by_source_total",
    ),
    _m(
        "kvoffload_prompt_tokens_total",
        "counter",
        "Prompt tokens processed (includes cached tokens).",
        ENGINE,
        "tokens",
        "vllm:prompt_tokens_total",
    ),
    # --- engine gauges ---------------------------------------------------------------------------
    _m(
        "kvoffload_gpu_kv_cache_usage_ratio",
        "gauge",
        "GPU KV cache usage (0-1) as last reported by vLLM.",
        ENGINE,
        "ratio",
        "vllm:kv_cache_usage_perc | vllm:gpu_cache_usage_perc",
    ),
    _m(
        "kvoffload_offload_inflight_ratio",
        "gauge",
        "Share of offload-tier chunks pinned by in-flight transfers (NOT fill level; advisory, "
        "max over API-server pids).",
        ENGINE,
        "ratio",
        "vllm:kv_offload_cpu_cache_usage_perc",
    ),
    _m(
        "kvoffload_requests_running",
        "gauge",
        "Requests running in the engine.",
        ENGINE,
        source="vllm:num_requests_running",
    ),
    _m(
        "kvoffload_requests_waiting",
        "gauge",
        "Requests waiting in the engine.",
        ENGINE,
        source="vllm:num_requests_waiting",
    ),
    _m(
        "kvoffload_offload_tier_bytes",
        "gauge",
        "Configured offload-tier capacity (from kv_offload_config_info, cache_config_info or the "
        "exporter config; absent when unknown).",
        ENGINE,
        "bytes",
        "vllm:kv_offload_config_info{cpu_kv_cache_size_bytes} | config tier_bytes",
    ),
    _m(
        "kvoffload_gpu_kv_cache_blocks",
        "gauge",
        "GPU KV cache blocks (num_gpu_blocks).",
        ENGINE,
        source="vllm:cache_config_info{num_gpu_blocks}",
    ),
    _m(
        "kvoffload_gpu_kv_block_size_tokens",
        "gauge",
        "Tokens per GPU KV block.",
        ENGINE,
        "tokens",
        source="vllm:cache_config_info{block_size}",
    ),
    # --- windowed derivations ----------------------------------------------------------------------
    _m(
        "kvoffload_state",
        "stateset",
        "Offload evidence state per engine over the window: not_configured, idle, storing, "
        "store_without_load (stores, no loads, while reuse is visible) or hit.",
        ENGINE + ("state",),
        group="derived",
    ),
    _m(
        "kvoffload_load_store_ratio",
        "gauge",
        "Offload load bytes / store bytes over the window (absent when nothing was stored).",
        WINDOWED,
        "ratio",
        group="derived",
    ),
    _m(
        "kvoffload_offload_load_bandwidth_bytes_per_second",
        "gauge",
        "Offload load bytes / load transfer seconds over the window (per-worker mean when TP > 1).",
        WINDOWED,
        "bytes_per_second",
        group="derived",
    ),
    _m(
        "kvoffload_offload_store_bandwidth_bytes_per_second",
        "gauge",
        "Offload store bytes / store transfer seconds over the window.",
        WINDOWED,
        "bytes_per_second",
        group="derived",
    ),
    _m(
        "kvoffload_gpu_prefix_hit_ratio",
        "gauge",
        "GPU prefix-cache hit tokens / queried tokens over the window.",
        WINDOWED,
        "ratio",
        group="derived",
    ),
    _m(
        "kvoffload_external_prefix_hit_ratio",
        "gauge",
        "External (offload) prefix-cache hit tokens / queried tokens over the window (from vLLM 0.16 "
        "a share of the tokens the GPU cache missed).",
        WINDOWED,
        "ratio",
        group="derived",
    ),
    _m(
        "kvoffload_ttft_seconds",
        "gauge",
        "Server-side time to first token quantiles over the window, interpolated from the vLLM histogram.",
        WINDOWED + ("quantile",),
        "seconds",
        "vllm:time_to_first_token_seconds",
        group="derived",
    ),
    _m(
        "kvoffload_window_seconds",
        "gauge",
        "Time actually covered by the window's first and last polls.",
        WINDOWED,
        "seconds",
        group="derived",
    ),
    # --- host and GPU memory -------------------------------------------------------------------------
    _m(
        "kvoffload_host_memory_total_bytes",
        "gauge",
        "Host memory total.",
        (),
        "bytes",
        "psutil.virtual_memory().total",
        group="memory",
    ),
    _m(
        "kvoffload_host_memory_available_bytes",
        "gauge",
        "Host memory available.",
        (),
        "bytes",
        "psutil.virtual_memory().available",
        group="memory",
    ),
    _m(
        "kvoffload_container_memory_limit_bytes",
        "gauge",
        "Memory limit of the vLLM process's cgroup (container), when set and visible.",
        (),
        "bytes",
        "cgroup memory.max | memory.limit_in_bytes",
        group="memory",
    ),
    _m(
        "kvoffload_container_memory_usage_bytes",
        "gauge",
        "Memory usage of the vLLM process's cgroup (container).",
        (),
        "bytes",
        "cgroup memory.current | memory.usage_in_bytes",
        group="memory",
    ),
    _m(
        "kvoffload_host_memory_headroom_bytes",
        "gauge",
        "Memory that can still be allocated: min(host available, container limit - usage).",
        (),
        "bytes",
        group="memory",
    ),
    _m(
        "kvoffload_process_resident_memory_bytes",
        "gauge",
        "Resident memory of a vLLM process.",
        ("target", "pid"),
        "bytes",
        "/proc/<pid>/status VmRSS",
        group="memory",
    ),
    _m(
        "kvoffload_process_locked_memory_bytes",
        "gauge",
        "Locked memory (VmLck) of a vLLM process; CUDA-pinned buffers may not show here.",
        ("target", "pid"),
        "bytes",
        "/proc/<pid>/status VmLck",
        group="memory",
    ),
    _m(
        "kvoffload_process_pinned_memory_bytes",
        "gauge",
        "Pinned memory (VmPin) of a vLLM process.",
        ("target", "pid"),
        "bytes",
        "/proc/<pid>/status VmPin",
        group="memory",
    ),
    _m(
        "kvoffload_gpu_memory_total_bytes",
        "gauge",
        "GPU framebuffer total.",
        ("gpu", "uuid", "name"),
        "bytes",
        "nvmlDeviceGetMemoryInfo",
        group="memory",
    ),
    _m(
        "kvoffload_gpu_memory_used_bytes",
        "gauge",
        "GPU framebuffer used.",
        ("gpu", "uuid", "name"),
        "bytes",
        "nvmlDeviceGetMemoryInfo",
        group="memory",
    ),
    _m(
        "kvoffload_gpu_memory_free_bytes",
        "gauge",
        "GPU framebuffer free.",
        ("gpu", "uuid", "name"),
        "bytes",
        "nvmlDeviceGetMemoryInfo",
        group="memory",
    ),
    _m(
        "kvoffload_gpu_process_memory_used_bytes",
        "gauge",
        "GPU memory used by one process.",
        ("gpu", "uuid", "pid"),
        "bytes",
        "nvmlDeviceGetComputeRunningProcesses",
        group="memory",
    ),
    # --- canary ----------------------------------------------------------------------------------------
    _m(
        "kvoffload_canary_ttft_seconds",
        "gauge",
        "Client-side canary TTFT (first token-bearing SSE event) per path: median of recent samples.",
        ("target", "path", "quantile"),
        "seconds",
        group="canary",
    ),
    _m(
        "kvoffload_canary_delta_ttft_seconds",
        "gauge",
        "TTFT(offload hit) - TTFT(control) medians; positive means offloading made it slower.",
        ("target", "control"),
        "seconds",
        group="canary",
    ),
    _m(
        "kvoffload_canary_delta_ttft_ci_seconds",
        "gauge",
        "Bootstrap confidence-interval bound of the canary delta TTFT.",
        ("target", "control", "bound"),
        "seconds",
        group="canary",
    ),
    _m(
        "kvoffload_canary_probes_total",
        "counter",
        "Canary revisit probes by classification.",
        ("target", "result"),
        group="canary",
    ),
    _m(
        "kvoffload_canary_cycles_total",
        "counter",
        "Canary cycles by result reason.",
        ("target", "reason"),
        group="canary",
    ),
    _m(
        "kvoffload_canary_tokens_spent_total",
        "counter",
        "Prompt + generated tokens spent by canaries.",
        ("target",),
        "tokens",
        group="canary",
    ),
    _m(
        "kvoffload_canary_budget_remaining_tokens",
        "gauge",
        "Canary token budget left in the current hour.",
        ("target",),
        "tokens",
        group="canary",
    ),
    _m(
        "kvoffload_canary_last_success_timestamp_seconds",
        "gauge",
        "Unix time of the last canary cycle that completed without error.",
        ("target",),
        "seconds",
        group="canary",
    ),
    _m(
        "kvoffload_canary_residency_seconds",
        "gauge",
        "Longest idle time after which a canary prefix was still reused from that tier (wait strategy).",
        ("target", "tier"),
        "seconds",
        group="canary",
    ),
    _m(
        "kvoffload_canary_verdict",
        "stateset",
        "Canary verdict: offload_faster, offload_slower, no_offload_hit or inconclusive.",
        ("target", "verdict"),
        group="canary",
    ),
)

CATALOGUE: dict[str, Metric] = {m.name: m for m in _METRICS}


def metric(name: str) -> Metric:
    """Look a metric up; a KeyError here means a name is used that the catalogue does not own."""
    return CATALOGUE[name]

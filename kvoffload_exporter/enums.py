"""Closed sets of the exporter core as StrEnums: a typo is a type error, not a silent 0.0 or a new label.

StrEnum members are `str`, so they compare, hash, format and serialise as their values: a mapping keyed
by `Signal` answers a lookup with the plain string, and `f"{state}"` writes `hit`. The canary's sets that
are label values of the catalogue (paths, results, reasons, verdicts, tiers, load bands) are here too, so
the catalogue needs nothing of the canary; `kvoffload_exporter.canary.types` re-exports them. Pure: imports nothing
from the project.
"""

from __future__ import annotations

from enum import StrEnum


class MetricType(StrEnum):
    """Catalogue type; state sets and infos are written as gauges in the text format (`Metric.prom_type`)."""

    COUNTER = "counter"
    GAUGE = "gauge"
    STATESET = "stateset"
    INFO = "info"
    HISTOGRAM = "histogram"
    SUMMARY = "summary"


class Unit(StrEnum):
    """Base units only (Prometheus conventions); NONE is the empty string, so it reads as "no unit"."""

    NONE = ""
    BYTES = "bytes"
    SECONDS = "seconds"
    RATIO = "ratio"
    TOKENS = "tokens"
    BYTES_PER_SECOND = "bytes_per_second"


class Group(StrEnum):
    """Section of docs/metrics.md and the dashboards a metric belongs to."""

    HEALTH = "health"
    ENGINE = "engine"
    DERIVED = "derived"
    MEMORY = "memory"
    CANARY = "canary"


class Signal(StrEnum):
    """Logical per-engine vLLM signals (`EngineSignals`), whatever family or generation carried them."""

    # Cumulative counters (EngineSignals.counters); the first six exist only with an offload connector.
    OFFLOAD_LOAD_BYTES = "offload_load_bytes"
    OFFLOAD_STORE_BYTES = "offload_store_bytes"
    OFFLOAD_LOAD_SECONDS = "offload_load_seconds"
    OFFLOAD_STORE_SECONDS = "offload_store_seconds"
    OFFLOAD_LOADS = "offload_loads"
    OFFLOAD_STORES = "offload_stores"
    OFFLOAD_ALLOCATION_FAILURES = "offload_allocation_failures"
    OFFLOAD_STORES_SKIPPED = "offload_stores_skipped"
    GPU_PREFIX_QUERIES = "gpu_prefix_queries"
    GPU_PREFIX_HITS = "gpu_prefix_hits"
    EXTERNAL_PREFIX_QUERIES = "external_prefix_queries"
    EXTERNAL_PREFIX_HITS = "external_prefix_hits"
    PROMPT_TOKENS = "prompt_tokens"
    PREFILL_SECONDS = "prefill_seconds"  # Σ request_prefill_time_seconds (SCHEDULED → first token)
    PREFILL_COMPUTED_TOKENS = "prefill_computed_tokens"  # Σ request_prefill_kv_computed_tokens
    # KV moved between instances (disaggregated prefill/decode), not to a tier: never offload evidence.
    KV_TRANSFER_BYTES = "kv_transfer_bytes"
    KV_TRANSFER_FAILURES = "kv_transfer_failures"
    # HiSparse's host-offloaded sparse attention pages: read on TPOT, never offload evidence.
    HISPARSE_CACHE_HITS = "hisparse_cache_hits"
    HISPARSE_CACHE_MISSES = "hisparse_cache_misses"
    HISPARSE_HOST_TO_DEVICE_BYTES = "hisparse_host_to_device_bytes"
    # Gauges (attributes of EngineSignals of the same name).
    GPU_KV_CACHE_USAGE = "gpu_kv_cache_usage"
    OFFLOAD_INFLIGHT = "offload_inflight"
    REQUESTS_RUNNING = "requests_running"
    REQUESTS_WAITING = "requests_waiting"


GAUGE_SIGNALS: tuple[Signal, ...] = (
    Signal.GPU_KV_CACHE_USAGE,
    Signal.OFFLOAD_INFLIGHT,
    Signal.REQUESTS_RUNNING,
    Signal.REQUESTS_WAITING,
)
"""Last-value gauges: attributes of EngineSignals named like the signal."""

COUNTER_SIGNALS: tuple[Signal, ...] = tuple(s for s in Signal if s not in GAUGE_SIGNALS)
"""Cumulative counters kept as floats; absent from `EngineSignals.counters` when the family was absent."""

OFFLOAD_SIGNALS: tuple[Signal, ...] = COUNTER_SIGNALS[:6]
"""Counters that exist only with an offload connector: 0 (not None) when the generation is known."""


class Generation(StrEnum):
    """Which vLLM offload metric generation a scrape carried (flat 0.24+, transfer_type 0.16+, none)."""

    FLAT = "flat"
    TRANSFER_TYPE = "transfer_type"
    NONE = "none"


class State(StrEnum):
    """Offload evidence state per engine, in documented order (see derive.evidence_state)."""

    NOT_CONFIGURED = "not_configured"
    IDLE = "idle"
    NOT_STORING = "not_storing"
    STORING = "storing"
    STORE_WITHOUT_LOAD = "store_without_load"
    HIT = "hit"


class ScrapeErrorReason(StrEnum):
    """Why a poll of a target failed (kvoffload_scrape_errors_total); never free text in labels."""

    TIMEOUT = "timeout"
    CONNECT = "connect"
    HTTP_STATUS = "http_status"
    CONTENT_TYPE = "content_type"
    TOO_LARGE = "too_large"
    TRUNCATED = "truncated"
    PARSE = "parse"
    SAMPLE_LIMIT = "sample_limit"  # too many series or engines (kvoffload_exporter.config.limits)
    LABEL_LIMIT = "label_limit"  # a label value (or line) longer than the cap
    REDIRECT = "redirect"  # redirected to another origin, or too many redirects
    STALE = "stale"  # no poll finished within the staleness bound (server.targetpoller.STALE_POLLS)
    TLS = "tls"  # the TLS handshake failed: a certificate not trusted, a name mismatch, no common protocol
    INTERNAL = "internal"


class CollectorName(StrEnum):
    """Collectors reported by kvoffload_exporter_collector_success / _duration_seconds, in exposition order."""

    VLLM = "vllm"
    HOST = "host"
    GPU = "gpu"
    CANARY = "canary"


class ProcessRole(StrEnum):
    """Role of a vLLM process in its target's tree: the stable key of kvoffload_engine_process_* (a pid is not)."""

    API_SERVER = "api_server"
    ENGINE_CORE = "engine_core"
    WORKER = "worker"
    HELPER = "helper"  # resource_tracker and any other child that is none of the above


class MemorySource(StrEnum):
    """Where a process tree's shared/anonymous memory came from (kvoffload_engine_process_tree_memory_info)."""

    SMAPS_ROLLUP = "smaps_rollup"  # Σ Pss_Shmem / Pss / Pss_Anon: shared pages split across their mappers
    CGROUP = "cgroup"  # the vLLM cgroup's memory.stat shmem / anon: each page charged once
    STATUS = "status"  # only /proc/<pid>/status: anon from RssAnon; shmem and PSS unknown


class Recommendation(StrEnum):
    """What to do with the offload tier given its payback over the window (derive/payback.py rules)."""

    GROW = "grow"
    KEEP = "keep"
    SHRINK = "shrink"
    DISABLE = "disable"


class StateReason(StrEnum):
    """Why an engine is in `store_without_load` or `not_storing`, or why a `hit` is degraded
    (kvoffload_exporter/derive/reasons.py: one rule each per state, checked in this order; docs/metrics.md and
    alerts/runbook.md explain how to read each)."""

    METRIC_MISSING = "metric_missing"
    WARMING_UP = "warming_up"
    STORE_ERRORS = "store_errors"
    TIER_SMALLER_THAN_PREFIX = "tier_smaller_than_prefix"
    STORES_SKIPPED = "stores_skipped"
    STORES_DROPPED = "stores_dropped"
    PROMOTION_FAILURES = "promotion_failures"
    LOAD_ERRORS = "load_errors"
    TIER_SMALLER_THAN_GPU_POOL = "tier_smaller_than_gpu_pool"
    PREFIX_SHORTER_THAN_BLOCK = "prefix_shorter_than_block"
    LOADS_SKIPPED_BY_REQUEST = "loads_skipped_by_request"
    EVICTED_BEFORE_REUSE = "evicted_before_reuse"
    NO_REUSE_IN_WORKLOAD = "no_reuse_in_workload"
    LOOKUP_ALWAYS_MISSES = "lookup_always_misses"
    SERVED_BY_ANOTHER_CONNECTOR = "served_by_another_connector"


class ConfigWarning(StrEnum):
    """A configuration fact that alone says a tier cannot pay off (kvoffload_config_warning{warning}), known
    from the first poll, before any traffic (the state still waits for data)."""

    TIER_SMALLER_THAN_GPU_POOL = "tier_smaller_than_gpu_pool"


class CapacityBasis(StrEnum):
    """Where a kvoffload_kv_capacity_tokens value comes from (label `basis`)."""

    NUM_GPU_BLOCKS = "num_gpu_blocks"  # cache_config_info num_gpu_blocks x block_size
    CPU_KV_CACHE_SIZE_TOKENS = "cpu_kv_cache_size_tokens"  # kv_offload_config_info (0.33+), at max_model_len
    TIER_BYTES = "tier_bytes"  # the tier's bytes over the KV bytes per token


# --- the canary's label values (kvoffload_exporter.canary.types re-exports them) ---


class CanaryPath(StrEnum):
    """What a timed canary request measured (label `path`)."""

    COLD = "cold"
    GPU_HIT = "gpu_hit"
    OFFLOAD_HIT = "offload_hit"
    RECOMPUTE = "recompute"
    CONTROL_TARGET = "control_target"


class ProbeResult(StrEnum):
    """Classification of a revisit probe (label `result`); `error` when the probe failed."""

    OFFLOAD_HIT = "offload_hit"
    GPU_HIT = "gpu_hit"
    PARTIAL = "partial"
    MISS = "miss"
    ERROR = "error"


class CycleReason(StrEnum):
    """Why a canary cycle ended as it did (label `reason`; see docs/canary.md)."""

    OK = "ok"
    NO_STORE = "no_store"
    NOT_DISPLACED = "not_displaced"
    NO_LOAD = "no_load"
    EVICTED_FROM_TIER = "evicted_from_tier"
    LOADED_BUT_SLOWER = "loaded_but_slower"
    ERROR = "error"


class VerdictKind(StrEnum):
    """The canary's verdict (label `verdict` of the kvoffload_canary_verdict state set)."""

    OFFLOAD_FASTER = "offload_faster"
    OFFLOAD_SLOWER = "offload_slower"
    NO_OFFLOAD_HIT = "no_offload_hit"
    INCONCLUSIVE = "inconclusive"
    OUTPUT_MISMATCH = "output_mismatch"  # an offload hit answered other tokens: before every speed verdict


class OutputPair(StrEnum):
    """Which two answers to the same prompt the output check compared (label `pair`)."""

    OFFLOAD_VS_GPU = "offload_vs_gpu"
    OFFLOAD_VS_RECOMPUTE = "offload_vs_recompute"


class OutputResult(StrEnum):
    """One comparison's (and the run's) outcome; `unverifiable` when the output does not depend on the prefix."""

    EQUAL = "equal"
    MISMATCH = "mismatch"
    UNVERIFIABLE = "unverifiable"
    NONE = "none"  # nothing compared yet


class Tier(StrEnum):
    """Cache tier a residency time is measured for (label `tier`)."""

    GPU = "gpu"
    OFFLOAD = "offload"


class LoadBand(StrEnum):
    """The target's load around a canary cycle (label `load_band`; thresholds: records.load_band)."""

    IDLE = "idle"
    LOW = "low"
    HIGH = "high"


class ErrorReason(StrEnum):
    """Why a canary request, preparation or cycle failed (label `reason` of kvoffload_canary_errors_total).

    The first eleven are a completion's own (protocol.Completion.error): the answer's status, transport or
    content; then the preflight's refusals (errors.CanaryError), a failed `/metrics` read in a cycle, the
    token budget running out mid-cycle, and `internal` for anything else (a bug: logged, retried)."""

    HTTP_429 = "http_429"
    HTTP_5XX = "http_5xx"
    HTTP_4XX = "http_4xx"
    TIMEOUT = "timeout"
    CONNECT = "connect"
    STREAM_ERROR = "stream_error"
    PROTOCOL = "protocol"
    INVALID = "invalid"
    TOO_LARGE = "too_large"
    TOO_DEEP = "too_deep"
    NON_FINITE = "non_finite"
    HEALTH = "health"
    AUTH = "auth"
    MODELS = "models"
    MODEL_MISMATCH = "model_mismatch"
    PLAN = "plan"
    METRICS = "metrics"
    BUDGET = "budget"
    INTERNAL = "internal"

    @classmethod
    def of(cls, value: object) -> ErrorReason:
        """The member named by `value`; `internal` for anything outside the closed set."""
        try:
            return cls(str(value))
        except ValueError:
            return cls.INTERNAL


class HttpRejectReason(StrEnum):
    """Why the exporter's own listener refused a client (kvoffload_exporter_http_rejected_total)."""

    CONNECTION_LIMIT = "connection_limit"  # over `web.max_connections` open connections: closed at once
    HEADER_TIMEOUT = "header_timeout"  # request line and headers not complete within `web.header_timeout`
    WRITE_TIMEOUT = "write_timeout"  # the client stopped reading its answer: closed after 30 s of no progress
    BAD_REQUEST = "bad_request"  # malformed request line or headers, or headers over the size cap: 400
    UNAUTHORIZED = "unauthorized"  # basic auth missing or wrong: 401
    AUTH_BUSY = "auth_busy"  # every password-check slot taken (a flood): 429 without checking


class ProbeEviction(StrEnum):
    """Why a /probe target's kept state was dropped (kvoffload_exporter_probe_evictions_total)."""

    IDLE = "idle"  # not probed for `probe.idle_ttl`
    CAPACITY = "capacity"  # `probe.max_targets` reached: the least recently probed one goes
    RELOAD = "reload"  # a reloaded configuration no longer allows it (or now polls it as a configured target)

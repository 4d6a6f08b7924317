"""vLLM `/metrics` exposition per version: one table of families, one writer.

Each `Family` row says when vLLM has it (`since`/`until`), its type, HELP, extra labels, whether its
children are pre-created at 0 or appear on first use, and whether it needs the OffloadingConnector.
`render(version, engines)` writes the text prometheus_client would (sorted labels, Go-formatted
numbers, `_created` gauges after each counter and histogram). Only `vllm:` families are written:
the `python_*`, `process_*` and `http_*` families of a real server are deliberately left out.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from prometheus_client.utils import floatToGoString

from exporter.sim.engine import CACHED_SOURCES, SOURCES, EngineConfig
from exporter.sim.stats import EngineStats, LabelValues
from exporter.sim.versions import Version, parse_version

VARIANTS = ("flat-only", "legacy-only", "underscores")  # the `rename` fault's metric generations / names

Children = Callable[[Version], "tuple[LabelValues, ...] | None"]


class EngineView(Protocol):
    index: int
    cfg: EngineConfig
    connector: bool
    stepped: bool
    stats: EngineStats


def _always(v: Version) -> tuple[LabelValues, ...]:
    return ((),)


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


@dataclass(frozen=True)
class Family:
    name: str  # without the `vllm:` prefix and without `_total`
    kind: str  # counter | gauge | histogram | info
    help: str
    labels: tuple[str, ...] = ()  # labels besides model_name and engine
    children: Children = _always
    since: Version = (0, 10)
    until: Version = (99, 0)  # last version that shows it by default
    hidden_until: Version | None = None  # deprecated: shown up to here with --show-hidden-metrics-for-version
    needs_connector: bool = False
    generation: str = ""  # "flat" | "legacy": dropped by the `rename` fault's variants
    source: str = ""  # stats key when it differs from `name`
    per_engine: bool = True
    help_changes: tuple[tuple[Version, str], ...] = ()

    def present(self, v: Version, variant: str | None, show_hidden: bool = False) -> bool:
        last = self.hidden_until if show_hidden and self.hidden_until else self.until
        if not self.since <= v <= last:
            return False
        return not (
            (variant == "flat-only" and self.generation == "legacy")
            or (variant == "legacy-only" and self.generation == "flat")
        )

    def help_for(self, v: Version) -> str:
        text = self.help
        for since, changed in self.help_changes:
            if v >= since:
                text = changed
        return text

    @property
    def key(self) -> str:
        return self.source or self.name


_C, _G, _H = "counter", "gauge", "histogram"


def _offload(*args: Any, **kw: Any) -> Family:
    """A family that exists only with the OffloadingConnector configured."""
    return Family(*args, **{**kw, "needs_connector": True})


_BYTES_HELP = "Histogram of KV offload {} size, in bytes."
_USAGE = (
    "Fraction of CPU KV-cache space currently pinned by in-flight {} that have not yet completed "
    "(0.0 = idle, 1.0 = saturated)."
)
_MFU = " (for Model Flops Utilization calculations)."

# Registration order of vLLM 0.26.0 (the connector's families come first).
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

# ---- info labels ---------------------------------------------------------------------------------

_CACHE_STATIC_026 = {
    "_block_size_resolved": "True",
    "cache_dtype": "auto",
    "calculate_kv_scales": "False",
    "enable_prefix_caching": "True",
    "is_attention_free": "False",
    "kv_cache_dtype_skip_layers": "[]",
    "kv_cache_memory_bytes": "None",
    "kv_offloading_backend": "native",
    "kv_offloading_size": "None",
    "kv_sharing_fast_prefill": "False",
    "mamba_block_size": "None",
    "mamba_cache_dtype": "auto",
    "mamba_cache_mode": "none",
    "mamba_page_size_padded": "None",
    "mamba_ssm_cache_dtype": "auto",
    "num_cpu_blocks": "None",
    "prefix_caching_hash_algo": "sha256",
    "prefix_match_unit": "None",
    "skip_page_size_padded": "None",
    "sliding_window": "None",
    "user_specified_block_size": "True",
    "user_specified_mamba_block_size": "False",
}
_CACHE_CHANGES_032 = {
    "cache_hit_alignment_tokens": "None",
    "enable_mamba_shared_prefix_checkpoint": "False",
    "hash_block_size": "None",
    "kv_cache_layout": "None",
    "mamba_ssm_cache_dtype": "float32",
    "prefix_cache_retention_interval": "0",
    "replayssm_buffer_len": "16",
    "swa_bounded_replay": "True",
    "use_kda_recoverssm": "False",
    "use_replayssm": "False",
}


def cache_config_labels(cfg: EngineConfig, v: Version) -> dict[str, str]:
    """`vllm:cache_config_info` labels: the 0.26.0 set (also used before 0.26, where it is not
    verified) or the 0.32.0 set. The capacity of the CPU tier is invisible here, as in real vLLM."""
    tokens = cfg.num_gpu_blocks * cfg.block_size
    out = dict(_CACHE_STATIC_026)
    out.update(
        block_size=str(cfg.block_size),
        gpu_memory_utilization=str(cfg.gpu_memory_utilization),
        kv_cache_max_concurrency=str(round(tokens / cfg.max_model_len, 2)),
        kv_cache_size_tokens=str(tokens),
        num_gpu_blocks=str(cfg.num_gpu_blocks),
        num_gpu_blocks_override=str(cfg.num_gpu_blocks),
    )
    if v >= (0, 32):
        del out["user_specified_mamba_block_size"], out["calculate_kv_scales"]
        out.update(_CACHE_CHANGES_032, effective_attention_block_size=str(cfg.block_size))
    return out


def offload_config_labels(cfg: EngineConfig) -> dict[str, str]:
    """`vllm:kv_offload_config_info` (0.33) labels for the CPUOffloadingSpec."""
    padded = -(-cfg.chunk_bytes // 4096) * 4096
    return {
        "cpu_num_chunks": str(cfg.num_cpu_chunks),
        "cpu_blocks_per_chunk": str(cfg.blocks_per_chunk),
        "cpu_kv_cache_size_bytes": str(cfg.num_cpu_chunks * padded),
        "cpu_kv_cache_size_tokens": str(cfg.num_cpu_chunks * cfg.offload_block_size),
    }


# ---- writer --------------------------------------------------------------------------------------


def _escape(value: str) -> str:
    return value.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")


def _num(value: float) -> str:
    """Go-style float text, as prometheus_client writes values and `le` bounds (1e+06, 0.001, +Inf)."""
    return str(floatToGoString(value))  # type: ignore[no-untyped-call]


def _line(name: str, labels: dict[str, str], value: float) -> str:
    body = ",".join(f'{k}="{_escape(v)}"' for k, v in sorted(labels.items()))
    return f"{name}{{{body}}} {_num(value)}\n" if body else f"{name} {_num(value)}\n"


def _store(fam: Family, stats: EngineStats) -> Mapping[LabelValues, object]:
    tables: dict[str, Mapping[str, Mapping[LabelValues, object]]] = {
        "counter": stats.counters,
        "gauge": stats.gauges,
        "histogram": stats.hists,
    }
    return tables[fam.kind].get(fam.key, {})


def _children(fam: Family, v: Version, stats: EngineStats) -> list[LabelValues]:
    seen = _store(fam, stats)
    base = fam.children(v)
    out = list(base) if base is not None else []
    out += [k for k in seen if k not in out]
    return out


def _base_labels(fam: Family, e: EngineView, extra: LabelValues) -> dict[str, str]:
    labels = {"model_name": e.cfg.model_name}
    if fam.per_engine:
        labels["engine"] = str(e.index)
    labels.update(zip(fam.labels, extra))
    return labels


def _write_family(fam: Family, v: Version, engines: Sequence[EngineView], out: list[str]) -> None:
    name = "vllm:" + fam.name
    if fam.kind == "info":
        _write_info(fam, v, engines, out)
        return
    shown = name + "_total" if fam.kind == "counter" and not name.endswith("_total") else name
    out.append(f"# HELP {shown} {fam.help_for(v)}\n# TYPE {shown} {fam.kind}\n")
    created: list[str] = []
    for e in engines if fam.per_engine else engines[:1]:
        stats = e.stats
        for child in _children(fam, v, stats):
            labels = _base_labels(fam, e, child)
            if fam.kind == "histogram":
                h = stats.hists.get(fam.key, {}).get(child)
                bounds = h.bounds if h else stats.hist_bounds(fam.key)
                cum = h.cumulative() if h else [0.0] * (len(bounds) + 1)
                for le, c in zip([_num(b) for b in bounds] + ["+Inf"], cum):
                    out.append(_line(name + "_bucket", {**labels, "le": le}, c))
                out.append(_line(name + "_count", labels, h.count if h else 0.0))
                out.append(_line(name + "_sum", labels, h.sum if h else 0.0))
            else:
                value = _store(fam, stats).get(child, 0.0)
                out.append(_line(shown, labels, value))  # type: ignore[arg-type]
            if fam.kind != "gauge":
                created.append(_line(name + "_created", labels, stats.created_at(fam.key, child)))
    if created:
        cname = name + "_created"
        out.append(f"# HELP {cname} {fam.help_for(v)}\n# TYPE {cname} gauge\n")
        out.extend(created)


def _write_info(fam: Family, v: Version, engines: Sequence[EngineView], out: list[str]) -> None:
    lines = []
    for e in engines:
        if fam.name == "cache_config_info":
            labels = {**cache_config_labels(e.cfg, v), "engine": str(e.index)}
        elif e.stepped:  # kv_offload_config_info is sent with the first scheduler stats
            labels = {**offload_config_labels(e.cfg), "model_name": e.cfg.model_name, "engine": str(e.index)}
        else:
            continue
        lines.append(_line("vllm:" + fam.name, labels, 1.0))
    out.append(f"# HELP vllm:{fam.name} {fam.help_for(v)}\n# TYPE vllm:{fam.name} gauge\n")
    out.extend(lines)


def families_for(
    version: str, connector: bool = True, variant: str | None = None, show_hidden: bool = False
) -> list[Family]:
    """The families a server of `version` registers (with or without the OffloadingConnector)."""
    v = parse_version(version)
    return [f for f in FAMILIES if f.present(v, variant, show_hidden) and (connector or not f.needs_connector)]


def render(version: str, engines: Sequence[EngineView], variant: str | None = None, show_hidden: bool = False) -> str:
    """The `/metrics` text of a vLLM `version` server whose engines are in the given state.

    `variant` (one of VARIANTS) bends the exposition the way the `rename` fault does; `show_hidden`
    is vLLM's `--show-hidden-metrics-for-version` (deprecated names one or two releases longer)."""
    if variant is not None and variant not in VARIANTS:
        raise ValueError(f"unknown exposition variant {variant!r}; choose from {', '.join(VARIANTS)}")
    v = parse_version(version)
    out: list[str] = []
    for fam in FAMILIES:
        if not fam.present(v, variant, show_hidden):
            continue
        shown = [e for e in engines if e.connector or not fam.needs_connector]
        if shown:
            _write_family(fam, v, shown, out)
    if variant == "underscores":  # prometheus_client ≥ 0.23 escaping: samples renamed, HELP/TYPE kept
        out = [chunk if chunk.startswith("#") else chunk.replace("vllm:", "vllm_", 1) for chunk in out]
    return "".join(out)

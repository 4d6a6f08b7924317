"""vLLM `/metrics` exposition per version: the writer of the `sim.families` table.

`render(version, engines)` writes the text prometheus_client would (sorted labels, Go-formatted
numbers, `_created` gauges after each counter and histogram). Only `vllm:` families are written:
the `python_*`, `process_*` and `http_*` families of a real server are deliberately left out.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from prometheus_client.utils import floatToGoString

from kvoffload_exporter.sim.engine import EngineConfig
from kvoffload_exporter.sim.families import FAMILIES
from kvoffload_exporter.sim.family import EngineView, Family
from kvoffload_exporter.sim.stats import EngineStats, LabelValues
from kvoffload_exporter.sim.versions import Version, parse_version

VARIANTS = ("flat-only", "legacy-only", "underscores")  # the `rename` fault's metric generations / names


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

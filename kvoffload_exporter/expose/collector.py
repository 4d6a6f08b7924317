"""Pure collector: the exporter's current state (targets, memory, self-metrics) → exposition text.

No I/O here: the poller hands in frozen views after each poll and serves the returned text from memory.
A failed source omits its series (never zeros); `kvoffload_up` and the collector gauges say why.
"""

from __future__ import annotations

import platform
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Protocol

from kvoffload_exporter import __version__
from kvoffload_exporter.catalogue import (
    COLLECTORS,
    CONFIG_WARNINGS,
    RECOMMENDATIONS,
    SCRAPE_ERROR_REASONS,
    SIGNAL_METRICS,
    STATE_REASONS,
    STATES,
    evidence_metric,
    unit_size_name,
)
from kvoffload_exporter.derive.convoy import ConvoyView
from kvoffload_exporter.derive.findings import EngineFindings, TargetView
from kvoffload_exporter.derive.procmem import footprint_ratio, growth_step
from kvoffload_exporter.derive.window import EngineDerived
from kvoffload_exporter.expose.mergeplan import Frag
from kvoffload_exporter.expose.render import Exposition, Heads, Spec
from kvoffload_exporter.ingest.backends.schema import Evidence, EvidenceKey
from kvoffload_exporter.ingest.snapshot import EngineSignals, GpuMemory, HostMemory, ProcessTreeMemory
from kvoffload_exporter.revision import revision

_SIGNALS = tuple(sig for sig, _ in SIGNAL_METRICS)
_ENGINE_NAMES = (
    *(m.name for _, m in SIGNAL_METRICS),
    "kvoffload_tier_bytes",
    "kvoffload_gpu_kv_cache_blocks",
    "kvoffload_gpu_kv_block_size_tokens",
)
_WINDOW_NAMES = (
    "kvoffload_window_seconds",
    "kvoffload_load_store_ratio",
    "kvoffload_load_bandwidth_bytes_per_second",
    "kvoffload_store_bandwidth_bytes_per_second",
    "kvoffload_gpu_prefix_hit_ratio",
    "kvoffload_external_prefix_hit_ratio",
    "kvoffload_prefill_seconds_per_token",
)
_TARGET_NAMES = (
    "kvoffload_up",
    "kvoffload_scrape_duration_seconds",
    "kvoffload_scrape_body_bytes",
    "kvoffload_last_success_timestamp_seconds",
)


def _spec(name: str, labels: Mapping[str, str]) -> Spec:
    """A series written under its own family name (a summary's `_sum` is not)."""
    return name, name, labels


def _same_labels(names: Sequence[str], labels: Mapping[str, str]) -> Callable[[], list[Spec]]:
    return lambda: [_spec(n, labels) for n in names]


def _engine(x: Exposition, t: TargetView, e: EngineSignals, d: EngineDerived | None, window: str) -> None:
    lb = {"target": t.label, "model_name": e.model_name, "engine": e.engine}
    found = t.engines.get(e.key) or EngineFindings()
    # every catalogue row that names a signal (counters and gauges), then the engine's own findings
    values = (*e.values(_SIGNALS), found.tier_bytes, found.gpu_blocks, found.block_size)
    x.series(("engine", t.label, *e.key), values, _same_labels(_ENGINE_NAMES, lb))
    by_source = sorted(e.prompt_tokens_by_source.items())
    x.series(
        ("by_source", t.label, *e.key, *(s for s, _ in by_source)),
        tuple(v for _, v in by_source),
        lambda: [_spec("kvoffload_prompt_tokens_by_source_total", {**lb, "source": s}) for s, _ in by_source],
    )
    _evidence(x, lb, e, found)
    _capacity(x, lb, found)
    if d is None:
        return
    wl = {**lb, "window": window}
    _convoy(x, e, t.convoy.get(e.key), wl)
    x.add_states("kvoffload_state", lb, STATES, d.state if d.state_known else None)  # unknown: every state 0
    x.add_states("kvoffload_state_reason", wl, STATE_REASONS, found.reason)
    windowed = (
        d.window_seconds,
        d.load_store_ratio,
        d.load_bandwidth,
        d.store_bandwidth,
        d.gpu_hit_ratio,
        d.external_hit_ratio,
        d.prefill_seconds_per_token,
    )
    x.series(("window", t.label, *e.key, window), windowed, _same_labels(_WINDOW_NAMES, wl))
    pb = found.payback
    if pb is not None:
        x.add("kvoffload_payback_seconds_per_byte_second", pb.seconds_per_byte_second, wl)
        x.add_states("kvoffload_recommendation", wl, RECOMMENDATIONS, pb.action)
    if d.ttft_quantiles and e.ttft is not None:  # quantiles over the window; _count/_sum: vLLM's, cumulative
        x.add_summary("kvoffload_ttft_seconds", wl, d.ttft_quantiles, e.ttft.count, e.ttft.sum)


def _capacity(x: Exposition, lb: Mapping[str, str], found: EngineFindings) -> None:
    """Capacity and configuration warnings: facts of the configuration, exported from the first poll."""
    for tier, basis, tokens in found.capacity:
        x.add("kvoffload_kv_capacity_tokens", tokens, {**lb, "tier": tier, "basis": basis})
    if found.capacity:
        x.add("kvoffload_effective_kv_capacity_tokens", sum(v for _, _, v in found.capacity), lb)
    if found.warnings is not None:
        for w in CONFIG_WARNINGS:
            x.add("kvoffload_config_warning", 1.0 if w in found.warnings else 0.0, {**lb, "warning": w})


def _convoy(x: Exposition, e: EngineSignals, c: ConvoyView | None, wl: Mapping[str, str]) -> None:
    """Summaries like kvoffload_ttft_seconds: window quantiles, vLLM's own cumulative _count and _sum."""
    if c is None:
        return
    delay, queue = e.lookup_async_delay, e.queue_time
    if c.lookup_delay_p99 is not None and delay is not None:
        x.add_summary("kvoffload_lookup_async_delay_seconds", wl, {0.99: c.lookup_delay_p99}, delay.count, delay.sum)
    if c.queue_time and queue is not None:
        x.add_summary("kvoffload_request_queue_time_seconds", wl, c.queue_time, queue.count, queue.sum)


_TIER_ONLY = frozenset(
    {
        Evidence.PROMOTION_FAILED,
        Evidence.CASCADE_FAILED,
        Evidence.DEFERRED_RELEASE,
        Evidence.DEFERRED_RELEASE_SECONDS,
        Evidence.DEFERRED_RELEASES,
    }
)
_TIER_DIRECTION = frozenset({Evidence.PRIMARY_USAGE, Evidence.TIER_TRANSFER_SECONDS})


def _evidence_labels(lb: Mapping[str, str], k: EvidenceKey) -> dict[str, str]:
    """Each evidence row's catalogue labels: detail is the result, source or stage of its signal."""
    if k.signal in (Evidence.PROMOTION_SECONDS, Evidence.PROMOTIONS):
        return {**lb, "tier": k.tier, "result": k.detail}
    if k.signal == Evidence.SERVED_BY:
        return {**lb, "source": k.detail}
    if k.signal == Evidence.KV_FETCH:
        return {**lb, "stage": k.detail}
    if k.signal in _TIER_ONLY:
        return {**lb, "tier": k.tier}
    if k.signal in _TIER_DIRECTION:
        return {**lb, "tier": k.tier, "direction": k.detail}
    if k.signal == Evidence.ACTIVE_JOBS:
        return {**lb, "tier": k.tier, "kind": k.detail}
    if k.signal in (Evidence.OPERATION_SECONDS, Evidence.OPERATIONS):
        return {**lb, "operation": k.detail}
    if k.signal == Evidence.TRANSFER_FAILED:
        return {**lb, "connector": k.connector, "kind": k.detail}
    if k.signal in (Evidence.INTEGRITY, Evidence.RESIDENCY_SECONDS, Evidence.RESIDENCY_SAMPLES):
        return {**lb, "kind": k.detail}
    out = {**lb, "tier": k.tier, "connector": k.connector}
    if k.signal == Evidence.DROPPED:
        out["reason"] = k.reason
    return out


def _evidence(x: Exposition, lb: Mapping[str, str], e: EngineSignals, found: EngineFindings) -> None:
    """The one evidence schema (kvoffload_exporter.ingest.backends), raw cumulative values like every engine counter."""
    rows = (*sorted(e.evidence.items()), *sorted(e.evidence_gauges.items()))
    units = sorted(found.unit_bytes.items())
    keys = (tuple(k for k, _ in rows), tuple(k for k, _ in units))

    def specs() -> list[Spec]:
        out = [_spec(evidence_metric(k.signal, k.unit), _evidence_labels(lb, k)) for k in keys[0]]
        return out + [_spec(unit_size_name(unit), {**lb, "basis": basis}) for unit, basis in keys[1]]

    values = (*(v for _, v in rows), *(v for _, v in units))
    x.series(("evidence", *lb.values(), keys), values, specs)


_NO_ERRORS = tuple(0.0 for _ in SCRAPE_ERROR_REASONS)


def _by_reason(x: Exposition, name: str, target: str, errors: Mapping[str, int]) -> None:
    counts = tuple(float(errors.get(r, 0)) for r in SCRAPE_ERROR_REASONS) if errors else _NO_ERRORS
    x.block(
        name,
        (target,),
        counts,
        lambda: (({"target": target, "reason": r}, v) for r, v in zip(SCRAPE_ERROR_REASONS, counts)),
    )


def _target(x: Exposition, t: TargetView, window: str) -> None:
    if t.pending:  # never polled: no `up 0` for a target nobody failed to read yet
        return
    polled = (1.0 if t.up else 0.0, t.duration, t.body_bytes, t.last_success)
    x.series(("target", t.label), polled, _same_labels(_TARGET_NAMES, {"target": t.label}))
    # pre-created so rate() works from the first error
    _by_reason(x, "kvoffload_scrape_errors_total", t.label, t.errors)
    if t.extra_errors is not None:  # only targets with extra_metrics_urls: no new series elsewhere
        _by_reason(x, "kvoffload_extra_endpoint_errors_total", t.label, t.extra_errors)
    if not t.up or t.snapshot is None:
        return
    x.add(
        "kvoffload_target_info",
        1.0,
        {"target": t.label, "vllm_version": t.version or "unknown", "generation": t.snapshot.generation},
    )
    backends, sources, target = t.snapshot.backends, t.snapshot.sources, t.label
    x.block(
        "kvoffload_backend_info",
        (target,),
        backends,
        lambda: (({"target": target, "backend": str(b)}, 1.0) for b in backends),
    )
    x.block(
        "kvoffload_source_metric_info",
        (target,),
        sources,
        lambda: (({"target": target, "signal": s, "resolved_name": n, "unit": u}, 1.0) for s, n, u in sources),
    )
    for e in t.snapshot.engines:
        _engine(x, t, e, t.derived.get(e.key), window)


def _host(x: Exposition, m: HostMemory) -> None:
    x.add("kvoffload_host_memory_total_bytes", m.total)
    x.add("kvoffload_host_memory_available_bytes", m.available)
    x.add("kvoffload_container_memory_limit_bytes", m.cgroup_limit)
    x.add("kvoffload_container_memory_usage_bytes", m.cgroup_usage)
    x.add("kvoffload_host_memory_headroom_bytes", m.headroom)
    for p in m.processes:  # role/rank, not pid: a restarted engine keeps its series
        lb = {"target": p.target, "role": p.role, "rank": p.rank}
        x.add("kvoffload_engine_process_resident_memory_bytes", p.rss, lb)
        x.add("kvoffload_engine_process_locked_memory_bytes", p.locked, lb)
        x.add("kvoffload_engine_process_pinned_memory_bytes", p.pinned, lb)
    for t in m.trees:
        _tree(x, t)


def _tree(x: Exposition, t: ProcessTreeMemory) -> None:
    lb = {"target": t.target}
    x.add("kvoffload_engine_process_tree_memory_info", 1.0, {**lb, "source": t.source})
    x.add("kvoffload_engine_process_tree_processes", float(t.processes), lb)
    x.add("kvoffload_engine_process_tree_shmem_bytes", t.shmem, lb)
    x.add("kvoffload_engine_process_tree_pss_bytes", t.pss, lb)
    x.add("kvoffload_engine_process_tree_anon_bytes", t.anon, lb)
    x.add("kvoffload_engine_process_tree_resident_sum_bytes", t.rss_sum, lb)
    x.add("kvoffload_engine_process_tree_locked_bytes", t.locked, lb)
    x.add("kvoffload_engine_process_tree_pinned_bytes", t.pinned, lb)
    x.add("kvoffload_engine_process_tree_cgroup_headroom_bytes", t.cgroup_headroom, lb)
    x.add("kvoffload_engine_process_tree_growth_step_bytes", growth_step(t), lb)
    x.add("kvoffload_tier_footprint_ratio", footprint_ratio(t), lb)


def _gpu(x: Exposition, devices: Sequence[GpuMemory]) -> None:
    for d in devices:
        lb = {"gpu": d.index, "uuid": d.uuid, "name": d.name}
        x.add("kvoffload_gpu_memory_total_bytes", d.total, lb)
        x.add("kvoffload_gpu_memory_used_bytes", d.used, lb)
        x.add("kvoffload_gpu_memory_free_bytes", d.free, lb)
        for pid, used in d.processes:
            x.add("kvoffload_gpu_process_memory_used_bytes", used, {"gpu": d.index, "uuid": d.uuid, "pid": str(pid)})


class SampleSink(Protocol):
    """Where collectors write samples (`render.Exposition`): names and label keys must be the catalogue's."""

    def add(self, name: str, value: float | None, labels: Mapping[str, str] | None = None) -> None: ...

    def add_states(self, name: str, labels: Mapping[str, str], states: Iterable[str], current: str | None) -> None: ...

    def add_summary(
        self, name: str, labels: Mapping[str, str], quantiles: Mapping[float, float], count: float, total: float | None
    ) -> None: ...


class Collector(Protocol):
    """A source of samples added to every render after the built-in ones (plugins: the canary)."""

    def collect(self, x: SampleSink) -> None: ...


def _shared(
    x: Exposition,
    host: HostMemory | None,
    gpu: Sequence[GpuMemory] | None,
    collectors: Mapping[str, tuple[bool, float]] | None,
    extras: Sequence[Collector],
) -> None:
    build = {"version": __version__, "revision": revision(), "python": platform.python_version()}
    x.add("kvoffload_exporter_build_info", 1.0, build)
    for name in COLLECTORS:
        if collectors and name in collectors:
            ok, dur = collectors[name]
            x.add("kvoffload_exporter_collector_success", 1.0 if ok else 0.0, {"collector": name})
            x.add("kvoffload_exporter_collector_duration_seconds", dur, {"collector": name})
    if host is not None:
        _host(x, host)
    if gpu is not None:
        _gpu(x, gpu)
    for extra in extras:
        extra.collect(x)


def collect(
    targets: Sequence[TargetView],
    window: str,
    host: HostMemory | None = None,
    gpu: Sequence[GpuMemory] | None = None,
    collectors: Mapping[str, tuple[bool, float]] | None = None,
    extras: Sequence[Collector] = (),
) -> str:
    """Render the whole exposition. `collectors` maps collector name → (success, duration seconds)."""
    x = Exposition()
    _shared(x, host, gpu, collectors, extras)  # no family mixes shared and per-target series
    for t in targets:
        _target(x, t, window)
    return x.text()


def target_fragment(t: TargetView, window: str, heads: Heads | None = None) -> Frag:
    """One target's series per family: rebuilt only when that target polls, merged by `render.merge`."""
    x = Exposition(heads)
    _target(x, t, window)
    return x.fragment()


def shared_fragment(
    host: HostMemory | None,
    gpu: Sequence[GpuMemory] | None,
    collectors: Mapping[str, tuple[bool, float]],
    extras: Sequence[Collector] = (),
) -> Frag:
    """Everything that is not one target's: build info, collectors, host/GPU memory, plugins."""
    x = Exposition()
    _shared(x, host, gpu, collectors, extras)
    return x.fragment()


__all__ = ["Collector", "SampleSink", "TargetView", "collect", "shared_fragment", "target_fragment"]

"""Immutable snapshot of the logical vLLM signals one `/metrics` scrape carries, per engine."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from kvoffload_exporter.enums import (
    COUNTER_SIGNALS,
    GAUGE_SIGNALS,
    OFFLOAD_SIGNALS,
    Generation,
    MemorySource,
    ProcessRole,
    Signal,
)
from kvoffload_exporter.ingest.backends.resolve import SourceRef
from kvoffload_exporter.ingest.backends.schema import Backend, EvidenceKey

EngineKey = tuple[str, str]
"""(model_name, engine): KV caches are per engine, so every signal is kept per engine."""

_GAUGE_FIELDS = {s: s.value for s in GAUGE_SIGNALS}
"""The gauge signals an engine holds as fields of its own; every other signal is one of its counters."""

GENERATIONS: tuple[Generation, ...] = tuple(Generation)

__all__ = [
    "COUNTER_SIGNALS",
    "GAUGE_SIGNALS",
    "GENERATIONS",
    "OFFLOAD_SIGNALS",
    "EngineKey",
    "EngineSignals",
    "Generation",
    "GpuMemory",
    "Histogram",
    "HostMemory",
    "MemorySource",
    "ProcessMemory",
    "ProcessRole",
    "ProcessTreeMemory",
    "Signal",
    "Snapshot",
]


@dataclass(frozen=True, slots=True)
class Histogram:
    """A cumulative Prometheus histogram: `counts[i]` is the count for `le=bounds[i]`, last is +Inf."""

    bounds: tuple[float, ...]
    counts: tuple[float, ...]
    sum: float
    count: float


@dataclass(frozen=True, slots=True)
class EngineSignals:
    """Everything the exporter needs from one engine; absent families are None, never 0."""

    model_name: str
    engine: str
    counters: Mapping[Signal, float]  # the COUNTER_SIGNALS that were present
    prompt_tokens_by_source: Mapping[str, float] = field(default_factory=dict)
    gpu_kv_cache_usage: float | None = None
    offload_inflight: float | None = None
    requests_running: float | None = None
    requests_waiting: float | None = None
    ttft: Histogram | None = None
    offload_load_size: Histogram | None = None
    offload_store_size: Histogram | None = None
    cache_config: Mapping[str, str] = field(default_factory=dict)
    offload_config: Mapping[str, str] = field(default_factory=dict)
    # The passive convoy view (loads serialising concurrent requests, vllm#44294), cumulative.
    lookup_async_delay: Histogram | None = None  # vllm:kv_offload_lookup_async_delay_seconds
    queue_time: Histogram | None = None  # vllm:request_queue_time_seconds
    kv_fetch_by_stage: Mapping[str, float] = field(default_factory=dict)  # vllm:num_requests_kv_fetch_by_stage
    # One evidence schema across backends (kvoffload_exporter.ingest.backends): cumulative series and last values.
    evidence: Mapping[EvidenceKey, float] = field(default_factory=dict)
    evidence_gauges: Mapping[EvidenceKey, float] = field(default_factory=dict)
    # The source of each cumulative evidence series read from a target's extra endpoint (1, 2, ...); a
    # series not in it is vLLM's own (0). A restart resets only its own source's series (derive.window).
    evidence_origin: Mapping[EvidenceKey, int] = field(default_factory=dict)

    @property
    def key(self) -> EngineKey:
        return (self.model_name, self.engine)

    def value(self, signal: Signal) -> float | None:
        """A signal's value whether it is a counter or a gauge; None when its family was absent."""
        gauge = _GAUGE_FIELDS.get(signal)
        return self.counters.get(signal) if gauge is None else getattr(self, gauge)

    def values(self, signals: Sequence[Signal]) -> list[float | None]:
        """`value` of each of `signals`, in order (the counters in one C-level pass)."""
        out = list(map(self.counters.get, signals))
        for i, gauge in _gauges_in(signals):
            out[i] = getattr(self, gauge)
        return out


_GAUGES_IN: dict[int, tuple[Sequence[Signal], tuple[tuple[int, str], ...]]] = {}


def _gauges_in(signals: Sequence[Signal]) -> tuple[tuple[int, str], ...]:
    """(position, field) of each gauge among `signals`: callers pass a few fixed tuples (the collector's
    catalogue order), so this is worked out once per tuple (by identity: hashing the signals would cost
    more than the loop), not once per signal per call."""
    got = _GAUGES_IN.get(id(signals))
    if got is not None and got[0] is signals:
        return got[1]
    found = tuple((i, g) for i, s in enumerate(signals) if (g := _GAUGE_FIELDS.get(s)) is not None)
    if isinstance(signals, tuple) and len(_GAUGES_IN) < 64:  # bounded; a tuple cannot change under us
        _GAUGES_IN[id(signals)] = (signals, found)
    return found


def _configured_size(raw: str | None) -> bool:
    try:
        return raw is not None and float(raw) > 0
    except ValueError:
        return False


@dataclass(frozen=True, slots=True)
class Snapshot:
    """One scrape, normalised. `generation` records which offload metric generation was used."""

    generation: Generation
    engines: tuple[EngineSignals, ...]
    families: frozenset[str] = frozenset()  # vLLM families seen (TYPE lines or samples), canonical names
    multiprocess: bool = False  # pid labels seen
    backends: tuple[Backend, ...] = ()  # offload backends whose families the scrape declares
    sources: tuple[SourceRef, ...] = ()  # (signal, resolved_name, unit) the evidence was read from
    _by_key: Mapping[EngineKey, EngineSignals] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        # Built once: every poll looks each engine of the new snapshot up in the previous one.
        object.__setattr__(self, "_by_key", {e.key: e for e in reversed(self.engines)})  # first wins, as before

    @property
    def offload_configured(self) -> bool:
        """An offload family, a known backend, or cache_config_info's configured offload size (which
        vLLM reports even where the backend registers no family yet): never `not_configured` then."""
        if self.generation != Generation.NONE or self.backends:
            return True
        return any(
            _configured_size(e.cache_config.get("kv_offloading_size"))
            or e.cache_config.get("kv_offloading_backend", "native") not in ("", "None", "native")
            for e in self.engines
        )

    def engine(self, key: EngineKey) -> EngineSignals | None:
        """O(1): the engine with this (model_name, engine) key, or None."""
        return self._by_key.get(key)


@dataclass(frozen=True)
class ProcessMemory:
    """One vLLM process, keyed for export by (target, role, rank): a restart keeps its series."""

    target: str
    pid: int
    rss: float | None
    locked: float | None
    pinned: float | None
    role: ProcessRole = ProcessRole.HELPER
    rank: str = "0"


@dataclass(frozen=True)
class ProcessTreeMemory:
    """A target's whole process tree with shared memory counted once (see kvoffload_exporter/derive/procmem.py).

    `rss_sum` is the naive Σ VmRSS, kept to show how much the per-pid view double counts; `tier_bytes` is
    the configured offload tier of the target's engines (None when unknown), `cgroup_*` the tree root's
    own cgroup (the vLLM container, never the exporter's).
    """

    target: str
    source: MemorySource
    processes: int
    shmem: float | None
    pss: float | None
    anon: float | None
    rss_sum: float | None
    locked: float | None
    pinned: float | None
    cgroup_limit: float | None = None
    cgroup_usage: float | None = None
    tier_bytes: float | None = None

    @property
    def cgroup_headroom(self) -> float | None:
        """limit − usage of the vLLM cgroup; None without a limit (the host's headroom applies then)."""
        if self.cgroup_limit is None or self.cgroup_usage is None:
            return None
        return max(0.0, self.cgroup_limit - self.cgroup_usage)


@dataclass(frozen=True)
class HostMemory:
    """Host and container memory plus the vLLM processes' own memory, in bytes."""

    total: float
    available: float
    cgroup_limit: float | None
    cgroup_usage: float | None
    processes: tuple[ProcessMemory, ...] = ()
    trees: tuple[ProcessTreeMemory, ...] = ()

    @property
    def headroom(self) -> float:
        """What can still be allocated: host available, capped by the container's limit − usage."""
        room = self.available
        if self.cgroup_limit is not None and self.cgroup_usage is not None:
            room = min(room, max(0.0, self.cgroup_limit - self.cgroup_usage))
        return room


@dataclass(frozen=True)
class GpuMemory:
    index: str
    uuid: str
    name: str
    total: float
    used: float
    free: float
    processes: tuple[tuple[int, float], ...] = ()  # (pid, used bytes)

"""Immutable snapshot of the logical vLLM signals one `/metrics` scrape carries, per engine."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

EngineKey = tuple[str, str]
"""(model_name, engine): KV caches are per engine, so every signal is kept per engine."""

GENERATIONS = ("flat", "transfer_type", "none")

COUNTER_SIGNALS = (
    "offload_load_bytes",
    "offload_store_bytes",
    "offload_load_seconds",
    "offload_store_seconds",
    "offload_loads",
    "offload_stores",
    "offload_allocation_failures",
    "offload_stores_skipped",
    "gpu_prefix_queries",
    "gpu_prefix_hits",
    "external_prefix_queries",
    "external_prefix_hits",
    "prompt_tokens",
)
"""Cumulative counters kept as floats; `None` means the family was absent from the scrape."""

OFFLOAD_SIGNALS = COUNTER_SIGNALS[:6]
"""Counters that exist only with an offload connector: 0 (not None) when the generation is known."""


@dataclass(frozen=True)
class Histogram:
    """A cumulative Prometheus histogram: `counts[i]` is the count for `le=bounds[i]`, last is +Inf."""

    bounds: tuple[float, ...]
    counts: tuple[float, ...]
    sum: float
    count: float


@dataclass(frozen=True)
class EngineSignals:
    """Everything the exporter needs from one engine; absent families are None, never 0."""

    model_name: str
    engine: str
    counters: Mapping[str, float]  # keys from COUNTER_SIGNALS that were present
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

    @property
    def key(self) -> EngineKey:
        return (self.model_name, self.engine)


@dataclass(frozen=True)
class Snapshot:
    """One scrape, normalised. `generation` records which offload metric generation was used."""

    generation: str  # one of GENERATIONS
    engines: tuple[EngineSignals, ...]
    families: frozenset[str] = frozenset()  # vLLM families seen (TYPE lines or samples), canonical names
    multiprocess: bool = False  # pid labels seen

    @property
    def offload_configured(self) -> bool:
        return self.generation != "none"

    def engine(self, key: EngineKey) -> EngineSignals | None:
        for e in self.engines:
            if e.key == key:
                return e
        return None


@dataclass(frozen=True)
class ProcessMemory:
    target: str
    pid: int
    rss: float | None
    locked: float | None
    pinned: float | None


@dataclass(frozen=True)
class HostMemory:
    """Host and container memory plus the vLLM processes' own memory, in bytes."""

    total: float
    available: float
    cgroup_limit: float | None
    cgroup_usage: float | None
    processes: tuple[ProcessMemory, ...] = ()

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

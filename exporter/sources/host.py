"""Host, container (cgroup v1/v2) and vLLM-process memory: psutil plus /proc and /sys reads."""

from __future__ import annotations

import os
from typing import Iterable

import psutil

from exporter.model import HostMemory, ProcessMemory


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="ascii") as f:
            return f.read().strip()
    except OSError:
        return None


def read_cgroup(cgroup_root: str) -> tuple[float | None, float | None]:
    """(limit, usage) in bytes from cgroup v2, else v1; limit None when unlimited or unknown."""
    limit = _read(os.path.join(cgroup_root, "memory.max"))
    usage = _read(os.path.join(cgroup_root, "memory.current"))
    if limit is None and usage is None:  # cgroup v1 layout
        limit = _read(os.path.join(cgroup_root, "memory", "memory.limit_in_bytes"))
        usage = _read(os.path.join(cgroup_root, "memory", "memory.usage_in_bytes"))
    lim = float(limit) if limit and limit.isdigit() else None
    # v1 reports "no limit" as a huge page-rounded number near 2^63.
    if lim is not None and lim >= 2 ** 60:
        lim = None
    use = float(usage) if usage and usage.isdigit() else None
    return lim, use


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


def read_host(proc_root: str, cgroup_root: str,
              targets: Iterable[tuple[str, list[int]]]) -> HostMemory:
    vm = psutil.virtual_memory()
    limit, usage = read_cgroup(cgroup_root)
    procs = []
    for target, pids in targets:
        for pid in pids:
            pm = process_memory(target, pid, proc_root)
            if pm is not None:
                procs.append(pm)
    return HostMemory(float(vm.total), float(vm.available), limit, usage, tuple(procs))

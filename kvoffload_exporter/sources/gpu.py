"""GPU framebuffer memory per device and per process through NVML (nvidia-ml-py's `pynvml`)."""

from __future__ import annotations

import contextlib

import pynvml

from kvoffload_exporter.ingest.snapshot import GpuMemory


class GpuUnavailable(Exception):
    """No driver / library: the GPU collector reports failure and everything else keeps working."""


class Nvml:
    """Owns nvmlInit/nvmlShutdown. `read()` raises GpuUnavailable when NVML cannot be used."""

    def __init__(self) -> None:
        self._ok = False

    def start(self) -> None:
        try:
            pynvml.nvmlInit()
            self._ok = True
        except pynvml.NVMLError as e:
            raise GpuUnavailable(str(e)) from e

    def stop(self) -> None:
        if self._ok:
            with contextlib.suppress(pynvml.NVMLError):
                pynvml.nvmlShutdown()
            self._ok = False

    def read(self) -> tuple[GpuMemory, ...]:
        if not self._ok:
            raise GpuUnavailable("NVML not initialised")
        out = []
        try:
            for i in range(pynvml.nvmlDeviceGetCount()):
                h = pynvml.nvmlDeviceGetHandleByIndex(i)
                mem = pynvml.nvmlDeviceGetMemoryInfo(h)
                name = pynvml.nvmlDeviceGetName(h)
                uuid = pynvml.nvmlDeviceGetUUID(h)
                try:
                    procs = tuple(
                        (p.pid, float(p.usedGpuMemory or 0)) for p in pynvml.nvmlDeviceGetComputeRunningProcesses(h)
                    )
                except pynvml.NVMLError:
                    procs = ()
                out.append(
                    GpuMemory(str(i), _s(uuid), _s(name), float(mem.total), float(mem.used), float(mem.free), procs)
                )
        except pynvml.NVMLError as e:
            raise GpuUnavailable(str(e)) from e
        return tuple(out)


def _s(v: object) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)

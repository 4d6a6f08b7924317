"""The simulator's model modules stay I/O-free: only `server` and `sender` may import aiohttp."""

from __future__ import annotations

import pkgutil
import subprocess
import sys

import exporter.sim

IO_MODULES = {"server", "sender"}
PURE = sorted(m.name for m in pkgutil.iter_modules(exporter.sim.__path__) if m.name not in IO_MODULES)


def test_pure_sim_modules_load_no_io_library() -> None:
    # A fresh interpreter, so whatever other tests imported does not hide a stray import.
    code = ("import sys\n" + "".join(f"import exporter.sim.{m}\n" for m in PURE)
            + "print(sorted(m for m in ('aiohttp', 'psutil', 'pynvml') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]", out
    assert {"engine", "profiles", "timing", "traffic", "simulator"} <= set(PURE)

"""Test support: stop every process a test started in its own session (SIGTERM, then SIGKILL after 10 s)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from collections.abc import Sequence


def stop_all(procs: Sequence[subprocess.Popen[bytes]]) -> None:
    """SIGTERM each live process group, then wait; a group still there after 10 s gets SIGKILL."""
    for p in procs:
        if p.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(p.pid, signal.SIGTERM)
    for p in procs:
        try:
            p.wait(timeout=10)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(p.pid, signal.SIGKILL)
            p.wait()

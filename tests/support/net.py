"""Loopback ports and readiness for tests that start servers."""

from __future__ import annotations

import socket
import subprocess
import time
import urllib.request


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago (the OS picks it)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_healthz(proc: subprocess.Popen[str] | subprocess.Popen[bytes], port: int, timeout_s: float = 30) -> None:
    """Until `serve` on `port` answers /healthz; fails the test if the process exits or the time runs out."""
    deadline = time.monotonic() + timeout_s
    while True:
        assert proc.poll() is None and time.monotonic() < deadline, "serve did not start"
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=5):
                return
        except OSError:
            time.sleep(0.1)

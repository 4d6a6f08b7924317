"""The real `serve` process under an idle-connection flood with few file descriptors: /healthz keeps
answering, nothing is logged as an error, the refusals are counted, and SIGTERM still ends it."""

from __future__ import annotations

import os
import resource
import signal
import socket
import subprocess
import sys
import urllib.request
from pathlib import Path

from support.net import free_port, wait_healthz


def _limit_fds() -> None:
    resource.setrlimit(resource.RLIMIT_NOFILE, (256, 256))


def _get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=5) as r:
        return str(r.read().decode())


def test_an_idle_flood_cannot_exhaust_descriptors_or_fill_the_log(tmp_path: Path) -> None:
    port = free_port()
    env = {
        **os.environ,
        "PYTHONPATH": str(Path(__file__).resolve().parent.parent),
        "KVOFFLOAD_WEB_HEADER_TIMEOUT": "30s",
    }
    cmd = [sys.executable, "-m", "kvoffload_exporter", "serve", "--target", "http://127.0.0.1:9"]
    cmd += ["--web.listen-address", f"127.0.0.1:{port}", "--no-collector.gpu", "--no-collector.host"]
    proc = subprocess.Popen(cmd, env=env, stderr=subprocess.PIPE, text=True, preexec_fn=_limit_fds)
    hogs: list[socket.socket] = []
    try:
        wait_healthz(proc, port)
        for _ in range(400):  # more than the process's 256 descriptors, half-sent and stalled
            try:
                s = socket.create_connection(("127.0.0.1", port), timeout=5, source_address=("127.0.0.2", 0))
                s.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n")
                hogs.append(s)
            except OSError:
                pass
        for _ in range(5):
            assert _get(f"http://127.0.0.1:{port}/healthz") == "ok\n"
        text = _get(f"http://127.0.0.1:{port}/metrics")
        rejected = next(
            float(line.rsplit(" ", 1)[1])
            for line in text.splitlines()
            if line.startswith('kvoffload_exporter_http_rejected_total{reason="connection_limit"}')
        )
        assert rejected >= 400 - 32  # 128 connections for 256 descriptors, a quarter of them per client
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(15) == 0
        err = proc.stderr.read() if proc.stderr else ""
        assert "Traceback" not in err and " ERROR " not in err
        assert "lowered to 128" in err
        assert len(err) < 2000, err[-500:]
    finally:
        for s in hogs:
            s.close()
        if proc.poll() is None:
            proc.kill()
            proc.wait()

"""`demo` stops on Ctrl-C without a traceback (it printed aiohttp's in 3 of 8 runs: the sender's session
closed under a streaming simulator handler, whose write then raised ClientConnectionResetError)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


# Busier than the default (4 req/s, 16 tokens): streams are always in flight when the signal lands, so the
# race that showed up in 3 of 8 default runs shows up in every run.
BUSY = ("--traffic-rate", "20", "--traffic-max-tokens", "256")


def _start(*extra: str) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    p = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "kvoffload_exporter",
            "demo",
            "--web.listen-address",
            "127.0.0.1:0",
            "--status-interval",
            "0.5",
            *extra,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    assert p.stdout is not None
    # The status lines start once the servers listen and the traffic runs: from there Ctrl-C is handled.
    for line in p.stdout:
        if line.startswith("["):
            break
    return p


def _stop(p: subprocess.Popen[str], signals: int = 1, gap: float = 0.05) -> tuple[int, str, str]:
    for i in range(signals):
        p.send_signal(signal.SIGINT)
        if i + 1 < signals:
            time.sleep(gap)
    out, err = p.communicate(timeout=60)
    return p.returncode, out, err


def test_demo_sigint_exits_cleanly_every_time() -> None:
    """Several runs, each interrupted while streams are in flight (4 req/s, one SSE event per token)."""
    for i in range(6):
        p = _start(*(BUSY if i % 2 else ()))
        time.sleep(1.0)  # a few requests in flight; not a timed assertion, only when the signal lands
        rc, out, err = _stop(p)
        assert "Traceback" not in err, err
        assert "ERROR" not in err, err
        assert rc == 0, (rc, err)  # Ctrl-C is the documented way to stop it: exit 0
        assert "traffic:" in out  # the summary line: the demo shut down in order, not killed


@pytest.mark.parametrize(("signals", "gap"), [(2, 0.02), (2, 0.08), (2, 0.15), (5, 0.03)])
def test_demo_any_number_of_ctrl_c_during_shutdown_exits_0(signals: int, gap: float) -> None:
    """Further Ctrl-Cs during shutdown, however spaced, are part of it: exit 0, summary, no traceback."""
    p = _start(*BUSY)
    time.sleep(1.0)
    rc, out, err = _stop(p, signals=signals, gap=gap)
    assert "Traceback" not in err, err
    assert rc == 0, (rc, err)
    assert "traffic:" in out


def test_demo_busy_port_names_the_listen_flag() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(1)
        port = s.getsockname()[1]
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        res = subprocess.run(
            [
                sys.executable,
                "-m",
                "kvoffload_exporter",
                "demo",
                "--web.listen-address",
                f"127.0.0.1:{port}",
                "--duration",
                "5",
            ],
            capture_output=True,
            text=True,
            env=env,
            timeout=60,
        )
    assert res.returncode == 1
    assert res.stderr.strip().endswith("choose another with --web.listen-address HOST:PORT"), res.stderr
    assert f"cannot listen on 127.0.0.1:{port}: address already in use" in res.stderr
    assert res.stderr.count("\n") == 1 and "Traceback" not in res.stderr

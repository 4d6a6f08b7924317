"""One rule for Ctrl-C (README, "Exit codes"): the long-running commands (`serve`, `simulate`, `demo`) run until
they are stopped, so SIGINT (or SIGTERM) is their normal end: a clean shutdown, exit 0. A command that ends on
its own (`check`, `inspect`, `bundle`) and is interrupted before it finishes exits 130 (128 + SIGINT)."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

LONG_RUNNING = {
    # command line, and a line on stdout or stderr that says it is up (signals are handled from there on)
    "serve": (
        ["serve", "--target", "http://127.0.0.1:9", "--web.listen-address", "127.0.0.1:0", "--no-collector.gpu"],
        "listening on http://",
    ),
    "simulate": (["simulate", "--listen", "127.0.0.1:0"], "serving Qwen/"),
    "demo": (["demo", "--listen", "127.0.0.1:0", "--status-interval", "0.5"], "engine 0: state"),
}


def _start(argv: list[str], **kw: object) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.Popen(
        [sys.executable, "-m", "kvoffload_exporter", *argv],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
        **kw,  # type: ignore[arg-type]
    )


@pytest.mark.parametrize("command", sorted(LONG_RUNNING))
def test_a_long_running_command_stopped_by_sigint_exits_0(command: str) -> None:
    argv, ready = LONG_RUNNING[command]
    p = _start(argv)
    try:
        assert p.stdout is not None
        seen = []
        for line in p.stdout:
            seen.append(line)
            if ready in line:
                break
        else:
            pytest.fail(f"{command} ended before it was up: {''.join(seen)}")
        p.send_signal(signal.SIGINT)
        rest, _ = p.communicate(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
            p.communicate()
    assert p.returncode == 0, "".join(seen) + rest
    assert "Traceback" not in "".join(seen) + rest


def _until(p: subprocess.Popen[str], text: str) -> str:
    assert p.stdout is not None
    seen = []
    for line in p.stdout:
        seen.append(line)
        if text in line:
            return line
    pytest.fail(f"ended before {text!r}: {''.join(seen)}")


def test_a_command_that_ends_on_its_own_exits_130_when_interrupted(tmp_path: Path) -> None:
    """`check` ends on its own; Ctrl-C in its second round is an interruption, not a result: exit 130."""
    sim = _start(["simulate", "--listen", "127.0.0.1:0", "--time-scale", "0.2"])
    check = None
    try:
        url = re.search(r"on (http://\S+)", _until(sim, "serving Qwen/"))
        assert url is not None
        check = _start(
            [
                *("check", "--target", url[1], "--rounds", "50", "--allow-pressure", "--settle", "0.01"),
                *("--secret-file", str(tmp_path / "s"), "--json", str(tmp_path / "c.json")),
            ]
        )
        _until(check, "round 1 ")
        check.send_signal(signal.SIGINT)
        out, _ = check.communicate(timeout=60)
        assert check.returncode == 130, out
        assert "Traceback" not in out
    finally:
        for p in (sim, check):
            if p is not None and p.poll() is None:
                p.send_signal(signal.SIGINT) if p is sim else p.kill()
                p.communicate(timeout=60)
    assert sim.returncode == 0

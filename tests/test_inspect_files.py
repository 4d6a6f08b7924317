"""`inspect` reads what an operator points it at without hanging and prints a target's text safely: a
FIFO is refused at once in one line (a pipe comes in as `-`), and label values with ANSI escapes or
other control characters are printed escaped, never raw into the terminal."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

LINE = 'vllm:kv_offload_load_bytes_total{{engine="0",model_name="{m}"}} {v}\n'
EVIL = "\x1b[2J\x1b]0;pwned\x07m\x9b31m\u202e"


def _run(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "kvoffload_exporter", "inspect", *args],
        capture_output=True,
        text=True,
        input=stdin,
        timeout=120,  # bounds a hang (the old open() of a FIFO); measures nothing
    )


def test_a_fifo_is_refused_at_once_in_one_line(tmp_path: Path) -> None:
    fifo = tmp_path / "dump.prom"
    os.mkfifo(fifo)  # no writer: a blocking open() would wait forever, deaf to Ctrl-C
    r = _run(str(fifo))
    assert r.returncode != 0 and r.stderr.strip() == (
        f"kvoffload-exporter inspect: cannot read {fifo}: it is a FIFO, not a regular file (use - for a pipe)"
    )


def test_a_pipe_still_comes_in_as_standard_input() -> None:
    r = _run("-", stdin=LINE.format(m="m", v=1))
    assert r.returncode == 0, r.stderr


def test_label_values_with_control_characters_are_printed_escaped(tmp_path: Path) -> None:
    a, b = tmp_path / "a.prom", tmp_path / "b.prom"
    a.write_text(LINE.format(m=EVIL, v=0), encoding="utf-8")
    b.write_text(LINE.format(m=EVIL, v=1e9), encoding="utf-8")
    r = _run(str(a), str(b))
    assert r.returncode == 0, r.stderr
    assert not any(c in r.stdout + r.stderr for c in "\x1b\x07\x9b\u202e")
    assert "\\x1b[2J\\x1b]0;pwned\\x07m\\x9b31m\\u202e" in r.stdout
    r = _run(str(a), str(b), "--json")  # JSON escapes them itself; the value stays the target's
    assert json.loads(r.stdout)["engines"][0]["model_name"] == EVIL and "\x1b" not in r.stdout

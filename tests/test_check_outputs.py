"""`check`'s outputs only ever create or replace regular files: a device node, a FIFO, a socket or a
directory given as `--json` (or planted in `--out`) is refused in one line with exit 2 before the first
request and left as it was; `--json -` (and `/dev/stdout`) writes the document to standard output; a
bundle that does not fit (`ulimit -f`) keeps `--json`'s file and says what is missing in a marker."""

from __future__ import annotations

import io
import json
import os
import resource
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from support.files import KINDS, same, special

from kvoffload_exporter.canary.check.evidence import INCOMPLETE
from kvoffload_exporter.cli import build_parser
from kvoffload_exporter.commands.check import run_check
from kvoffload_exporter.sim.server import start
from kvoffload_exporter.sim.simulator import SimOptions, Simulator

RUN = ("--rounds", "1", "--min-samples", "5", "--allow-pressure")


async def _run(tmp_path: Path, *argv: str) -> tuple[int, dict[str, Any], str, str, int]:
    """Exit code, document, stdout, stderr and the number of requests the simulator saw."""
    sim = Simulator(SimOptions(time_scale=0.2, seed=5))
    runner, url = await start(sim)
    try:
        args = build_parser().parse_args(
            ["check", "--target", url, "--settle", "0.01", "--secret-file", str(tmp_path / "secret"), *argv]
        )
        out, err = io.StringIO(), io.StringIO()
        code, doc = await run_check(args, stdout=out, stderr=err)
        return code, doc, out.getvalue(), err.getvalue(), sim.engines[0].requests
    finally:
        await runner.cleanup()


@pytest.mark.parametrize("kind", KINDS)
async def test_json_at_a_non_regular_file_is_refused_before_the_first_request(tmp_path: Path, kind: str) -> None:
    target = tmp_path / "check.json"
    with special(target, kind):
        before = os.lstat(target)
        code, _, out, err, requests = await _run(tmp_path, *RUN, "--json", str(target))
        assert same(target, before)
    assert code == 2 and requests == 0 and out == ""
    assert err.splitlines() == [
        f"kvoffload-exporter check: invalid configuration: --json: cannot write {target}: it is "
        f"{'a FIFO' if kind == 'fifo' else 'a character device' if kind == 'device' else 'a ' + kind}, "
        "not a regular file (--json - writes to standard output)"
    ]


async def test_json_dev_null_is_refused_not_replaced(tmp_path: Path) -> None:
    before = os.lstat("/dev/null")
    code, _, _, err, requests = await _run(tmp_path, *RUN, "--json", "/dev/null")
    assert (
        code == 2
        and requests == 0
        and "--json: cannot write /dev/null: it is a character device, not a regular file" in err
    )
    assert same(Path("/dev/null"), before)


async def test_out_with_a_planted_fifo_is_refused_before_the_first_request(tmp_path: Path) -> None:
    out = tmp_path / "evidence"
    out.mkdir()
    os.mkfifo(out / "requests.jsonl")
    code, _, _, err, requests = await _run(tmp_path, *RUN, "--out", str(out))
    assert code == 2 and requests == 0 and len(err.splitlines()) == 1
    assert f"--out: cannot write the bundle into {out}: {out / 'requests.jsonl'} is a FIFO" in err
    assert sorted(os.listdir(out)) == ["requests.jsonl"]


async def test_a_secret_file_that_is_a_fifo_is_a_usage_error(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "fifo")
    code, _, _, err, requests = await _run(tmp_path, *RUN, "--secret-file", str(tmp_path / "fifo"))
    assert code == 2 and requests == 0 and "is a FIFO, not a regular file" in err


@pytest.mark.parametrize("where", ["-", "/dev/stdout"])
async def test_json_dash_writes_the_document_to_stdout_and_the_report_to_stderr(tmp_path: Path, where: str) -> None:
    code, doc, out, err, _ = await _run(tmp_path, *RUN, "--json", where)
    assert json.loads(out) == json.loads(json.dumps(doc)) and doc["exit_code"] == code
    assert "TTFT path" in err  # the verdict table, which stdout carries without --json -
    assert not (tmp_path / "-").exists() and sorted(os.listdir(tmp_path)) == ["secret"]


def _wait_port(port: int, proc: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 30
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return
        except OSError:
            assert time.monotonic() < deadline and proc.poll() is None, "simulator did not start"
            time.sleep(0.1)


def _small_files() -> None:
    """In the child: files past 40,000 bytes fail with EFBIG (`ulimit -f`), instead of a SIGXFSZ kill."""
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (40_000, 40_000))


def test_a_bundle_that_does_not_fit_keeps_the_json_and_says_so(tmp_path: Path, free_port: Callable[[], int]) -> None:
    port = free_port()
    cmd = [sys.executable, "-m", "kvoffload_exporter"]
    outputs = ["--secret-file", str(tmp_path / "secret"), "--json", str(tmp_path / "check.json")]
    outputs += ["--out", str(tmp_path / "evidence")]
    sim = subprocess.Popen(
        [*cmd, "simulate", "--listen", f"127.0.0.1:{port}", "--time-scale", "0.2", "--seed", "5"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        _wait_port(port, sim)
        r = subprocess.run(
            [*cmd, "check", "--target", f"http://127.0.0.1:{port}", "--settle", "0.01", *RUN, *outputs],
            capture_output=True,
            text=True,
            timeout=300,
            preexec_fn=_small_files,
        )
    finally:
        sim.terminate()
        sim.wait(10)
    doc = json.loads((tmp_path / "check.json").read_text())  # written first, whole
    assert doc["verdict"] != "error", r.stderr
    ev = tmp_path / "evidence"
    marker = (ev / INCOMPLETE).read_text().splitlines()
    missing = [ln.split(":")[0] for ln in marker[1:]]
    assert marker[0].startswith(f"incomplete: {len(missing)} of ") and "requests.jsonl" in missing
    assert all(ln.endswith(": File too large") for ln in marker[1:])
    assert json.loads((ev / "report.json").read_text()) == doc  # the verdict is in the bundle too
    assert sorted(os.listdir(ev)) == sorted({*os.listdir(ev)} - {".tmp"})  # no temp file left
    assert not any(n.startswith(".") for n in os.listdir(ev)) and not set(missing) & set(os.listdir(ev))
    assert r.returncode == 3 and "Traceback" not in r.stderr and "Errno" not in r.stderr
    assert f"evidence bundle {ev} incomplete: {len(missing)} of" in r.stderr.splitlines()[-1]


async def test_a_complete_bundle_removes_the_marker_of_an_earlier_incomplete_one(tmp_path: Path) -> None:
    from test_check_run import _run as failed_run  # a result without a run: the bundle's table, quickly

    from kvoffload_exporter.canary.check import checkreport, evidence

    result = await failed_run()
    (tmp_path / INCOMPLETE).write_text("incomplete: 3 of 9 files not written\n")
    evidence.write_bundle(tmp_path, evidence.Evidence(result, checkreport.document(result), "t\n", {}))
    assert not (tmp_path / INCOMPLETE).exists() and (tmp_path / "report.json").is_file()

"""Log lines: JSON and logfmt carry structured fields (`target`, `reason`, `url` redacted, `error`), RFC 3339
timestamps with milliseconds and zone, control characters escaped; the real `serve` logs a reload with what
changed and one line on shutdown with the signal and uptime; connect errors carry no client internals."""

from __future__ import annotations

import json
import logging
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from kvoffload_exporter.config.settings import Config, TargetConfig
from kvoffload_exporter.server import logs

RFC3339_MS = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}(Z|[+-]\d\d:\d\d)$")
HOSTILE = "vllm\r\nINFO forged line \x1b[31mred\x1b[0m"


def _record(msg: str = "target %s: down", *args: object, **extra: object) -> logging.LogRecord:
    r = logging.LogRecord("kvoffload.poll", logging.WARNING, __file__, 1, msg, args or (HOSTILE,), None)
    r.__dict__.update(extra)
    return r


FIELDS = {"target": HOSTILE, "reason": "connect", "url": "http://user:secret@10.0.0.7:8000/metrics", "error": "x"}


def test_json_line_has_structured_fields_redacted_url_and_an_rfc3339_timestamp():
    doc = json.loads(logs.JsonFormatter().format(_record(**FIELDS)))
    assert RFC3339_MS.match(doc["ts"]), doc["ts"]
    assert doc["target"] == HOSTILE and doc["reason"] == "connect" and doc["error"] == "x"
    assert doc["url"] == "http://10.0.0.7:8000/metrics"
    assert "secret" not in json.dumps(doc)


def test_json_and_logfmt_lines_are_single_lines_with_control_characters_escaped():
    for fmt in (logs.JsonFormatter(), logs.LogfmtFormatter(), logs.TextFormatter()):
        line = fmt.format(_record(**FIELDS))
        assert "\n" not in line and "\r" not in line and "\x1b" not in line, (fmt, line)
        assert "forged line" in line


def test_logfmt_fields_and_timestamp():
    line = logs.LogfmtFormatter().format(_record(**FIELDS))
    ts = re.search(r"^ts=(\S+)", line)
    assert ts and RFC3339_MS.match(ts.group(1))
    assert "reason=connect" in line and "url=http://10.0.0.7:8000/metrics" in line and "secret" not in line
    assert 'target="vllm\\r\\nINFO forged line \\x1b[31mred\\x1b[0m"' in line


def test_text_line_escapes_a_hostile_label():
    line = logs.TextFormatter().format(_record())
    assert line.endswith("target vllm\\r\\nINFO forged line \\x1b[31mred\\x1b[0m: down")
    assert RFC3339_MS.match(line.split(" ", 1)[0])


def test_reload_changes_names_targets_added_removed_and_settings_changed():
    old = Config(targets=(TargetConfig(url="http://a:1"), TargetConfig(url="http://b:1")), poll_interval=5.0)
    new = Config(
        targets=(TargetConfig(url="http://a:1", tier_bytes=8e9), TargetConfig(url="http://c:1")), poll_interval=1.0
    )
    changes = logs.reload_changes(old, new)
    assert changes == {"added": ["c:1"], "removed": ["b:1"], "changed": ["poll_interval", "targets[a:1]"]}
    msg = logs.reload_message(changes, 2)
    assert msg == "configuration reloaded: 2 target(s); added c:1; removed b:1; changed poll_interval, targets[a:1]"
    assert logs.reload_message(logs.reload_changes(old, old), 2).endswith("nothing changed")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _write(path: Path, targets: list[str], port: int, poll: str) -> None:
    path.write_text(
        f"listen: 127.0.0.1:{port}\npoll_interval: {poll}\ntimeout: 0.5\nwindow: 10s\ngpu: false\nhost: false\n"
        "targets:\n" + "".join(f"  - {t}\n" for t in targets)
    )


def _metrics(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
        return r.read().decode()


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_real_serve_logs_json_errors_reload_and_shutdown(tmp_path, sig):
    port, dead = _free_port(), _free_port()
    conf = tmp_path / "c.yaml"
    _write(conf, [f"http://user:pw-0f-logs@127.0.0.1:{dead}"], port, "0.05")
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parent.parent)}
    cmd = [sys.executable, "-m", "kvoffload_exporter", "serve", "--config.file", str(conf), "--log.format", "json"]
    proc = subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True, env=env)
    try:
        deadline, body = time.monotonic() + 30, ""
        while "kvoffload_up" not in body:
            assert proc.poll() is None and time.monotonic() < deadline, "serve did not start"
            try:
                body = _metrics(port)
            except OSError:
                time.sleep(0.1)
        _write(conf, [f"http://user:pw-0f-logs@127.0.0.1:{dead}", "http://127.0.0.1:10"], port, "0.1")
        proc.send_signal(signal.SIGHUP)
        while 'target="127.0.0.1:10"' not in body:
            assert proc.poll() is None and time.monotonic() < deadline, "the reload never showed"
            time.sleep(0.1)
            body = _metrics(port)
        proc.send_signal(sig)
        assert proc.wait(15) == 0
        err = proc.stderr.read() if proc.stderr else ""
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    lines = [json.loads(x) for x in err.splitlines()]  # every line is one JSON object
    assert all(RFC3339_MS.match(x["ts"]) for x in lines)
    (down,) = [x for x in lines if x.get("target") == f"127.0.0.1:{dead}"]
    assert down["reason"] == "connect" and down["url"] == f"http://127.0.0.1:{dead}/metrics"
    assert down["error"] == f"cannot connect to 127.0.0.1:{dead}: connection refused"
    assert "ssl:" not in err and "Errno" not in err and "pw-0f-logs" not in err
    (reloaded,) = [x for x in lines if x["msg"].startswith("configuration reloaded")]
    assert reloaded["added"] == ["127.0.0.1:10"] and reloaded["removed"] == []
    assert reloaded["changed"] == ["poll_interval"] and reloaded["targets"] == 2
    last = lines[-1]
    assert last["signal"] == sig.name and 0 < last["uptime_seconds"] < 60
    assert last["msg"].startswith(f"shutting down on {sig.name} after ")

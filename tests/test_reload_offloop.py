"""SIGHUP never stops the event loop: the files are parsed in a worker thread while /healthz answers, a
storm of signals collapses into one more reload, and the real process reloads its web config (or says
it did not) and still ends on SIGTERM after an alias bomb."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import bcrypt
from aiohttp.test_utils import TestClient, TestServer
from support.net import free_port

from kvoffload_exporter.config.settings import Config
from kvoffload_exporter.server.app import make_app
from kvoffload_exporter.server.reloader import Reloader

HASH = bcrypt.hashpw(b"s3cret", bcrypt.gensalt(4)).decode()


async def test_the_loop_answers_while_a_reload_parses() -> None:
    release = threading.Event()
    applied: list[object] = []
    parses = 0

    def parse() -> int:
        nonlocal parses
        parses += 1
        release.wait(30)  # a slow parse (10 MB of YAML) in the reload thread
        return parses

    reloader: Reloader[int] = Reloader(parse, applied.append)
    async with TestClient(TestServer(make_app(Config(gpu_enabled=False, host_enabled=False)))) as client:
        reloader.trigger()
        for _ in range(20):  # a SIGHUP storm while the first parse runs
            reloader.trigger()
        for _ in range(5):
            assert (await client.get("/healthz")).status == 200  # the loop is free during the parse
        assert applied == []
        release.set()
        await reloader.wait()
    assert applied == [1, 2] and parses == 2  # twenty signals: one more reload, with the newest files


async def test_a_parse_that_raises_is_applied_as_the_error() -> None:
    applied: list[object] = []

    def parse() -> int:
        raise ValueError("bad file")

    reloader: Reloader[int] = Reloader(parse, applied.append)
    reloader.trigger()
    await reloader.wait()
    assert len(applied) == 1 and isinstance(applied[0], ValueError)


def _get(url: str, auth: str | None = None) -> int:
    req = urllib.request.Request(url, headers={"Authorization": auth} if auth else {})
    try:
        with urllib.request.urlopen(req, timeout=5) as r:
            return int(r.status)
    except urllib.error.HTTPError as e:
        return int(e.code)


def _basic(user: str) -> str:
    import base64

    return "Basic " + base64.b64encode(f"{user}:s3cret".encode()).decode()


def test_the_real_process_reloads_its_web_config_and_survives_an_alias_bomb(tmp_path: Path) -> None:
    port = free_port()
    web = tmp_path / "web.yml"
    web.write_text(f"basic_auth_users:\n  alice: '{HASH}'\n")
    conf = tmp_path / "c.yaml"
    conf.write_text(f"targets: [http://127.0.0.1:9]\nlisten: 127.0.0.1:{port}\ngpu: false\nhost: false\n")
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parent.parent)}
    cmd = [
        sys.executable,
        "-m",
        "kvoffload_exporter",
        "serve",
        "--config.file",
        str(conf),
        "--web.config.file",
        str(web),
    ]
    proc = subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True, env=env)
    url = f"http://127.0.0.1:{port}/healthz"
    try:
        deadline = time.monotonic() + 30
        while True:
            assert proc.poll() is None and time.monotonic() < deadline, "serve did not start"
            try:
                if _get(url, _basic("alice")) == 200:
                    break
            except OSError:
                time.sleep(0.1)
        web.write_text(f"basic_auth_users:\n  bob: '{HASH}'\n")
        proc.send_signal(signal.SIGHUP)
        while _get(url, _basic("bob")) != 200:
            assert time.monotonic() < deadline, "the web config reload never showed"
            time.sleep(0.1)
        assert _get(url, _basic("alice")) == 401
        bomb = "".join(f"{chr(98 + i)}: &{chr(98 + i)} [" + ",".join([f"*{chr(97 + i)}"] * 9) + "]\n" for i in range(8))
        conf.write_text('a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]\n' + bomb)
        proc.send_signal(signal.SIGHUP)
        time.sleep(0.5)
        assert _get(url, _basic("bob")) == 200
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(15) == 0
        err = proc.stderr.read() if proc.stderr else ""
        assert "web config reloaded: 1 basic-auth user(s)" in err
        assert "aliases (*name) are not allowed" in err and "Traceback" not in err
        assert "clear text" in err  # basic auth without TLS is warned about at start
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()

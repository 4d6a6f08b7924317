"""`serve` at run time: SIGHUP reload (added/removed targets, history of unchanged ones kept, an invalid
file keeps the old config), credentials from the target URL used as auth and shown nowhere, and the
real process: bind errors before "listening", SIGHUP reloading instead of killing it."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from kvoffload_exporter.cli import build_parser
from kvoffload_exporter.commands.serve import ReloadStatus, config_from_args, reload
from kvoffload_exporter.server.app import EXPORTER, make_app
from tests.support.net import free_port, wait_healthz

BODY = (Path(__file__).parent / "fixtures" / "h200-0.6b" / "A_00_initial.prom").read_text()


def _upstream(seen: list[str | None]) -> web.Application:
    async def metrics(request: web.Request) -> web.Response:
        seen.append(request.headers.get("Authorization"))
        return web.Response(text=BODY, content_type="text/plain")

    app = web.Application()
    app.router.add_get("/metrics", metrics)
    return app


async def _until(cond, what: str) -> None:  # type: ignore[no-untyped-def]
    for _ in range(500):
        if cond():
            return
        await asyncio.sleep(0.02)
    raise AssertionError(f"never happened: {what}")


async def _metrics_when(client: TestClient, needle: str) -> str:
    """/metrics once it shows `needle` (the exposition is re-merged at most every few milliseconds)."""
    body = ""
    for _ in range(200):
        body = await (await client.get("/metrics")).text()
        if needle in body:
            return body
        await asyncio.sleep(0.02)
    raise AssertionError(f"/metrics never showed {needle!r}")


def _write(path: Path, targets: list[str], extra: str = "") -> None:
    path.write_text(
        "poll_interval: 0.05\ntimeout: 0.5\nwindow: 10s\ngpu: false\nhost: false\n"
        + "targets:\n"
        + "".join(f"  - {t}\n" for t in targets)
        + extra
    )


async def test_sighup_reload_keeps_history_adds_removes_and_survives_a_bad_file(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    seen: list[str | None] = []
    up_a, up_b = TestServer(_upstream(seen)), TestServer(_upstream(seen))
    await up_a.start_server()
    await up_b.start_server()
    a, b = f"http://127.0.0.1:{up_a.port}", f"http://127.0.0.1:{up_b.port}"
    conf = tmp_path / "c.yaml"
    _write(conf, [a, "http://127.0.0.1:9"])
    args = build_parser().parse_args(["serve", "--config.file", str(conf)])
    app = make_app(config_from_args(args, {}))
    exp = app[EXPORTER]
    status = ReloadStatus(last_success=1.0)
    exp.add_collector(status)
    client = TestClient(TestServer(app))
    await client.start_server()
    try:
        kept = exp.targets[0]
        await _until(lambda: len(kept.history) >= 3, "three polls of a")
        history_before = len(kept.history)

        _write(conf, [a, b])  # one removed, one added
        reload(args, exp, status)
        assert [t.cfg.url for t in exp.targets] == [a, b] and exp.targets[0] is kept
        assert len(kept.history) >= history_before, "the unchanged target keeps its history"
        await _until(lambda: exp.targets[1].polls >= 1, "the added target is polled")
        body = await _metrics_when(client, "kvoffload_exporter_config_last_reload_successful 1.0")
        assert "127.0.0.1:9" not in body, "the removed target's series are gone"
        assert status.last_success > 1.0

        conf.write_text("window: forever\n")
        with caplog.at_level(logging.ERROR):
            reload(args, exp, status)
        assert [t.cfg.url for t in exp.targets] == [a, b], "an invalid file keeps the running config"
        assert [r.getMessage() for r in caplog.records if "reload failed" in r.getMessage()] == [
            "configuration reload failed, keeping the running one: window: not a duration: 'forever' "
            "(use e.g. 5 (seconds), 500ms, 30s, 5m, 1h30m)"
        ]
        body = await _metrics_when(client, "kvoffload_exporter_config_last_reload_successful 0.0")
        assert "# TYPE kvoffload_exporter_config_last_reload_success_timestamp_seconds gauge" in body
    finally:
        await client.close()
        await up_a.close()
        await up_b.close()


async def test_userinfo_is_sent_as_basic_auth_and_redacted_everywhere(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    seen: list[str | None] = []
    up = TestServer(_upstream(seen))
    await up.start_server()
    port = up.port
    conf = tmp_path / "c.yaml"
    _write(conf, [f"http://scraper:pw-0f-target@127.0.0.1:{port}/metrics", "http://u:pw-0f-dead@127.0.0.1:9"])
    with caplog.at_level(logging.DEBUG):
        app = make_app(config_from_args(build_parser().parse_args(["serve", "--config.file", str(conf)]), {}))
        client = TestClient(TestServer(app))
        await client.start_server()
        try:
            exp = app[EXPORTER]
            await _until(lambda: all(t.polls >= 2 for t in exp.targets), "two polls of each target")
            body = await (await client.get("/metrics")).text()
            page = await (await client.get("/")).text()
        finally:
            await client.close()
            await up.close()
    assert seen[0] == "Basic c2NyYXBlcjpwdy0wZi10YXJnZXQ="
    assert f'target="127.0.0.1:{port}"' in body
    for text in (body, page, caplog.text, repr(app[EXPORTER].config)):
        assert "pw-0f" not in text and "scraper:" not in text


def _get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=2) as r:
        return str(r.read().decode())


def test_the_real_process_reloads_on_sighup_and_stops_on_sigterm(tmp_path: Path) -> None:
    port = free_port()
    conf = tmp_path / "c.yaml"
    _write(conf, ["http://127.0.0.1:9"], f"listen: 127.0.0.1:{port}\n")
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parent.parent)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "kvoffload_exporter", "serve", "--config.file", str(conf)],
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        deadline = time.monotonic() + 30
        body = ""
        while "kvoffload_up" not in body:
            assert proc.poll() is None and time.monotonic() < deadline, "serve did not start"
            try:
                body = _get(f"http://127.0.0.1:{port}/metrics")
            except OSError:
                time.sleep(0.1)
        _write(conf, ["http://127.0.0.1:9", "http://127.0.0.1:10"], f"listen: 127.0.0.1:{port}\n")
        proc.send_signal(signal.SIGHUP)
        while 'target="127.0.0.1:10"' not in body:
            assert proc.poll() is None, "SIGHUP must not kill the process"
            assert time.monotonic() < deadline, "the reload never showed"
            time.sleep(0.1)
            body = _get(f"http://127.0.0.1:{port}/metrics")
        assert "kvoffload_exporter_config_last_reload_successful 1.0" in body
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(15) == 0
        err = proc.stderr.read() if proc.stderr else ""
        assert "Traceback" not in err and "configuration reloaded: 2 target(s)" in err
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_port_in_use_fails_before_listening_in_the_real_process() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(1)
        port = s.getsockname()[1]
        r = subprocess.run(
            [
                sys.executable,
                "-m",
                "kvoffload_exporter",
                "serve",
                "--target",
                "http://127.0.0.1:9",
                "--web.listen-address",
                f"127.0.0.1:{port}",
            ],
            capture_output=True,
            text=True,
            timeout=60,
            env={**os.environ, "PYTHONPATH": str(Path(__file__).parent.parent)},
            check=False,
        )
    assert r.returncode == 1 and r.stdout == ""
    assert r.stderr.strip().splitlines() == [
        f"kvoffload-exporter serve: cannot listen on 127.0.0.1:{port}: Address already in use"
    ]


async def test_the_real_process_probes_follow_a_sighup_reload(tmp_path: Path) -> None:
    """`serve --config.file` with target A, then A replaced by B and SIGHUP: within 5 s `/probe?target=B`
    answers 200 and `/probe?target=A` answers 403 (it kept answering 200 from a frozen copy)."""
    up_a, up_b = TestServer(_upstream([])), TestServer(_upstream([]))
    await up_a.start_server()
    await up_b.start_server()
    a, b = f"http://127.0.0.1:{up_a.port}", f"http://127.0.0.1:{up_b.port}"
    port = free_port()
    conf = tmp_path / "c.yaml"
    _write(conf, [a], f"listen: 127.0.0.1:{port}\n")
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parent.parent)}
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "kvoffload_exporter",
        "serve",
        "--config.file",
        str(conf),
        env=env,
        stderr=subprocess.DEVNULL,
    )
    base = f"http://127.0.0.1:{port}/probe"

    async def status(session: aiohttp.ClientSession, target: str) -> int:
        try:
            async with session.get(base, params={"target": target}) as r:
                return r.status
        except aiohttp.ClientError:
            return 0  # not listening yet

    try:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=5)) as session:
            started = time.monotonic()
            while await status(session, a) != 200:
                assert proc.returncode is None and time.monotonic() - started < 30, "serve did not start"
                await asyncio.sleep(0.1)
            assert await status(session, b) == 403
            _write(conf, [b], f"listen: 127.0.0.1:{port}\n")
            proc.send_signal(signal.SIGHUP)
            sent = time.monotonic()
            seen = (0, 0)
            while time.monotonic() - sent < 5.0:
                seen = (await status(session, b), await status(session, a))
                if seen == (200, 403):
                    break
                await asyncio.sleep(0.05)
            assert seen == (200, 403), f"5 s after SIGHUP: /probe B {seen[0]}, A {seen[1]}"
    finally:
        if proc.returncode is None:
            proc.terminate()
            await proc.wait()
        await up_a.close()
        await up_b.close()


def _post(url: str) -> tuple[int, str]:
    req = urllib.request.Request(url, method="POST", data=b"")
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


@pytest.mark.parametrize("lifecycle", [True, False])
def test_post_reload_is_the_sighup_reload_with_the_lifecycle_flag(tmp_path: Path, lifecycle: bool) -> None:
    port = free_port()
    conf = tmp_path / "c.yaml"
    _write(conf, ["http://127.0.0.1:9"], f"listen: 127.0.0.1:{port}\n")
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parent.parent)}
    argv = [sys.executable, "-m", "kvoffload_exporter", "serve", "--config.file", str(conf)]
    proc = subprocess.Popen([*argv, *(["--web.enable-lifecycle"] if lifecycle else [])], env=env)
    try:
        wait_healthz(proc, port)
        _write(conf, ["http://127.0.0.1:9", "http://127.0.0.1:10"], f"listen: 127.0.0.1:{port}\n")
        code, text = _post(f"http://127.0.0.1:{port}/-/reload")
        body = _get(f"http://127.0.0.1:{port}/metrics")
        if not lifecycle:
            assert code == 403 and "--web.enable-lifecycle" in text
            assert 'target="127.0.0.1:10"' not in body
            return
        assert (code, text) == (200, "targets: reloaded\n")
        assert 'target="127.0.0.1:10"' in body and "kvoffload_exporter_config_last_reload_successful 1.0" in body
        conf.write_text("targets: [\n")  # a broken file: refused, the running configuration kept
        assert _post(f"http://127.0.0.1:{port}/-/reload")[0] == 500
        deadline = time.monotonic() + 20  # the exposition shows it from the next poll's render on
        while "kvoffload_exporter_config_last_reload_successful 0.0" not in _get(f"http://127.0.0.1:{port}/metrics"):
            assert time.monotonic() < deadline, "the failed reload never showed"
            time.sleep(0.2)
        with pytest.raises(urllib.error.HTTPError) as e:
            _get(f"http://127.0.0.1:{port}/-/reload")
        assert e.value.code == 405
    finally:
        proc.terminate()
        proc.wait(15)

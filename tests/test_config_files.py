"""Operators' files are read without blocking and within caps: a FIFO or a device given as `--config.file`,
`--web.config.file`, a password, token or API-key file is refused in one line at start (never waited
on); a token with a line break is refused before any poll; a key twice in one mapping is refused with
its line; a metrics path that would be a route template is refused; on SIGHUP a FIFO keeps the running
configuration (the reload metric says 0) and SIGTERM still ends the process, even with a reload stuck."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
import urllib.request
from pathlib import Path

import pytest
from support.hang import fails_if_blocked
from support.net import free_port

from kvoffload_exporter.cli import main
from kvoffload_exporter.config.settings import ConfigError, load_file
from kvoffload_exporter.config.webconfig import WebConfigError
from kvoffload_exporter.config.webconfig import load as load_web_config
from kvoffload_exporter.saferead import FileRefused, read_regular

T = "http://127.0.0.1:9"


def _serve_check(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    with fails_if_blocked():
        code = main(["serve", *argv, "--config.check"])
    return code, capsys.readouterr().err


def test_read_regular_refuses_what_is_not_a_regular_file_unopened(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "fifo")
    (tmp_path / "dir").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "dir")
    with fails_if_blocked():
        for path, kind in [("fifo", "a FIFO"), ("dir", "a directory"), ("link", "a directory")]:
            with pytest.raises(FileRefused, match=f"is {kind}, not a regular file"):
                read_regular(tmp_path / path, 1024)
        with pytest.raises(FileRefused, match="is a character device"):
            read_regular("/dev/zero", 1024)
    (tmp_path / "f").write_bytes(b"x" * 100)
    assert read_regular(tmp_path / "f", 100) == b"x" * 100
    with pytest.raises(FileRefused, match="100 bytes, over the 99-byte cap"):
        read_regular(tmp_path / "f", 99)
    (tmp_path / "to-f").symlink_to(tmp_path / "f")
    with pytest.raises(FileRefused, match="symbolic link"):
        read_regular(tmp_path / "to-f", 100, follow_links=False)
    with pytest.raises(FileRefused) as e:
        read_regular(tmp_path / "missing", 100)
    assert e.value.strerror == "No such file or directory"


@pytest.mark.parametrize("flag", ["--config.file", "--web.config.file"])
def test_a_fifo_as_config_or_web_config_is_refused_at_start_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], flag: str
) -> None:
    fifo = tmp_path / "conf.yml"
    os.mkfifo(fifo)  # no writer: a blocking open() waits forever (and SIGINT with it)
    code, err = _serve_check(capsys, "--target", T, flag, str(fifo))
    assert code == 2 and len(err.splitlines()) == 1
    assert f"{fifo} is a FIFO, not a regular file" in err


def test_the_web_config_is_refused_when_it_is_a_device(tmp_path: Path) -> None:
    with pytest.raises(WebConfigError, match="character device"):
        load_web_config("/dev/zero")


@pytest.mark.parametrize(
    ("content", "key"),
    [
        (b"s3cr3t\r\nX-Injected: 1\n", "bearer_token_file"),
        (b"s3cr3t\x1b[2Jen\n", "bearer_token_file"),
        (b"s3cr\n3t\n", "password_file"),
    ],
)
def test_a_secret_with_a_line_break_or_control_character_is_refused_before_any_poll(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: bytes, key: str
) -> None:
    secret = tmp_path / "secret"
    secret.write_bytes(content)
    auth = f"bearer_token_file: {secret}" if key == "bearer_token_file" else f"username: u\n    password_file: {secret}"
    conf = tmp_path / "c.yaml"
    conf.write_text(f"targets:\n  - url: {T}\n    {auth}\n")
    code, err = _serve_check(capsys, "--config.file", str(conf))
    assert code == 2 and len(err.splitlines()) == 1 and "control character" in err and key in err
    assert "s3cr" not in err and "Injected" not in err and "Traceback" not in err


def test_an_api_key_file_that_is_a_fifo_is_refused_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fifo = tmp_path / "key"
    os.mkfifo(fifo)
    code, err = _serve_check(capsys, "--target", T, "--canary.enabled", "--canary.api-key-file", str(fifo))
    assert code == 2 and len(err.splitlines()) == 1 and "is a FIFO, not a regular file" in err


def test_a_key_twice_is_refused_naming_the_key_and_both_lines(tmp_path: Path) -> None:
    conf = tmp_path / "c.yaml"
    conf.write_text(f"targets:\n  - {T}\nwindow: 5m\ntargets:\n  - http://127.0.0.1:10\n")
    with pytest.raises(ConfigError, match=r"line 4: duplicate key 'targets' \(first on line 1\)"):
        load_file(str(conf))
    conf.write_text(f"targets:\n  - url: {T}\n    name: a\n    name: b\n")
    with pytest.raises(ConfigError, match="line 4: duplicate key 'name'"):
        load_file(str(conf))
    conf.write_text("basic_auth_users:\n  alice: x\n  alice: y\n")  # the web config: a user twice
    with pytest.raises(WebConfigError, match="line 3: duplicate key 'alice'"):
        load_web_config(str(conf))


def test_a_duplicate_key_that_is_not_a_name_is_not_echoed(tmp_path: Path) -> None:
    conf = tmp_path / "c.yaml"
    conf.write_text("targets: []\n'sk-SECRET value': 1\n'sk-SECRET value': 2\n")
    with pytest.raises(ConfigError) as e:
        load_file(str(conf))
    assert "line 3: duplicate key (first on line 2)" in str(e.value) and "SECRET" not in str(e.value)


@pytest.mark.parametrize("path", ["/x/{name}", "/x/{tail:.*}", "/m%65trics", "/a b", "/x\\y", "/é"])
def test_a_metrics_path_that_is_not_a_plain_path_is_refused(capsys: pytest.CaptureFixture[str], path: str) -> None:
    code, err = _serve_check(capsys, "--target", T, "--web.telemetry-path", path)
    assert code == 2 and "--web.telemetry-path: must be a plain URL path" in err and len(err.splitlines()) == 1


def test_the_target_flag_says_a_password_in_it_is_visible_in_ps(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["serve", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert "visible to every local user in ps" in out and "password_file" in out


def _get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=5) as r:
        return str(r.read().decode())


def _metrics_until(url: str, needle: str, proc: subprocess.Popen[str]) -> str:
    deadline = time.monotonic() + 30
    while True:
        assert proc.poll() is None, "serve exited"
        try:
            body = _get(url)
            if needle in body:
                return body
        except OSError:
            pass
        assert time.monotonic() < deadline, f"/metrics never showed {needle!r}"
        time.sleep(0.1)


def test_sighup_with_a_fifo_config_keeps_the_running_one_and_sigterm_still_ends(tmp_path: Path) -> None:
    port = free_port()
    conf = tmp_path / "c.yaml"
    head = f"listen: 127.0.0.1:{port}\npoll_interval: 0.2\ntimeout: 0.5\ngpu: false\nhost: false\n"
    conf.write_text(head + "targets:\n  - http://127.0.0.1:9\n")
    proc = subprocess.Popen(
        [sys.executable, "-m", "kvoffload_exporter", "serve", "--config.file", str(conf)],
        stderr=subprocess.PIPE,
        text=True,
    )
    url = f"http://127.0.0.1:{port}/metrics"
    try:
        _metrics_until(url, "kvoffload_exporter_config_last_reload_successful 1", proc)
        conf.unlink()
        os.mkfifo(conf)  # no writer: on the old code the reload thread waited in open() forever
        proc.send_signal(signal.SIGHUP)
        body = _metrics_until(url, "kvoffload_exporter_config_last_reload_successful 0", proc)
        assert 'target="127.0.0.1:9"' in body  # the running configuration stays
        conf.unlink()
        conf.write_text(head + "targets:\n  - http://127.0.0.1:9\n  - http://127.0.0.1:10\n")
        proc.send_signal(signal.SIGHUP)  # a later valid file is applied: nothing is wedged
        body = _metrics_until(url, 'target="127.0.0.1:10"', proc)
        assert "kvoffload_exporter_config_last_reload_successful 1" in body
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0
        err = proc.stderr.read() if proc.stderr else ""
        assert "Traceback" not in err
        assert next(ln for ln in err.splitlines() if "reload failed" in ln).endswith("is a FIFO, not a regular file")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_sigterm_ends_the_process_while_a_reload_is_stuck(tmp_path: Path) -> None:
    """A parse that never returns (a file on a hung network mount): the loop stops and the interpreter
    exits anyway, because the reload runs in a daemon thread, not in the executor joined at exit."""
    code = textwrap.dedent(
        """
        import asyncio, threading
        from kvoffload_exporter.server.reloader import Reloader

        async def main():
            started = threading.Event()
            def parse():
                started.set()
                threading.Event().wait()  # forever
            reloader = Reloader(parse, print)
            reloader.trigger()
            while not started.is_set():
                await asyncio.sleep(0.01)
            print("stuck", flush=True)

        asyncio.run(main())
        print("exited", flush=True)
        """
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and r.stdout.split() == ["stuck", "exited"], r.stderr


def test_a_pidfile_that_is_a_fifo_or_a_device_is_not_read(tmp_path: Path) -> None:
    """The host collector reads `pidfile:` on every collection, in a worker thread joined on exit."""
    from kvoffload_exporter.sources import host

    os.mkfifo(tmp_path / "vllm.pid")
    with fails_if_blocked():
        assert host.pids_for(None, str(tmp_path / "vllm.pid"), None) == []
        assert host.pids_for(None, "/dev/zero", None) == []
    (tmp_path / "ok.pid").write_text(f"{os.getpid()}\n")
    assert host.pids_for(None, str(tmp_path / "ok.pid"), None)[0] == os.getpid()

"""Authentication that leaks nothing: unknown users cost the same bcrypt work as known ones, a
wrong-password flood cannot starve a real login, verified and failed pairs are cached, plain-HTTP basic
auth is warned about, the web config reloads, and no error echoes what the file holds."""

from __future__ import annotations

import asyncio
import logging
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import bcrypt
import pytest
from aiohttp import web

from kvoffload_exporter.commands.serve import bind
from kvoffload_exporter.config import webconfig
from kvoffload_exporter.config.settings import Config
from kvoffload_exporter.enums import HttpRejectReason
from kvoffload_exporter.server import webauth
from kvoffload_exporter.server.app import make_app
from kvoffload_exporter.server.connslots import MAX_PENDING_PER_CLIENT
from kvoffload_exporter.server.guards import GuardStats
from kvoffload_exporter.server.listener import GuardedSite, ListenLimits
from kvoffload_exporter.server.webauth import AuthGate, WebReload
from kvoffload_exporter.sources.vllm_http import basic_auth

FIX = Path(__file__).parent / "fixtures" / "webconfig"
HASH5 = bcrypt.hashpw(b"s3cret", bcrypt.gensalt(5)).decode()
TLS = "tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n"


def _write(tmp_path: Path, text: str, name: str = "web.yml") -> str:
    for f in FIX.iterdir():
        (tmp_path / f.name).write_bytes(f.read_bytes())
    p = tmp_path / name
    p.write_text(text)
    return str(p)


def _auth(user: str, password: str) -> dict[str, str]:
    return {"Authorization": basic_auth(user, password)}


class Recorder:
    """bcrypt.checkpw as it is, recording which hash each check ran against."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.hashes: list[bytes] = []
        real = bcrypt.checkpw

        def checkpw(password: bytes, hashed: bytes) -> bool:
            self.hashes.append(hashed)
            return real(password, hashed)

        monkeypatch.setattr(bcrypt, "checkpw", checkpw)


async def test_unknown_users_cost_a_check_of_the_configured_cost(monkeypatch: pytest.MonkeyPatch) -> None:
    rec = Recorder(monkeypatch)
    gate = AuthGate({"prometheus": HASH5.encode()})
    try:
        assert await gate.verify("a", "nobody", "s3cret") is False
        assert await gate.verify("b", "prometheus", "wrong") is False
        assert await gate.verify("c", "prometheus", "s3cret") is True
    finally:
        gate.close()
    assert len(rec.hashes) == 3
    assert [h[:7] for h in rec.hashes] == [b"$2b$05$"] * 3  # the unknown user paid a cost-5 check too


async def test_verified_and_failed_pairs_are_cached(monkeypatch: pytest.MonkeyPatch) -> None:
    rec = Recorder(monkeypatch)
    gate = AuthGate({"prometheus": HASH5.encode()})
    try:
        for _ in range(5):
            assert await gate.verify("a", "prometheus", "s3cret") is True
            assert await gate.verify("a", "prometheus", "wrong") is False
    finally:
        gate.close()
    assert len(rec.hashes) == 2


@pytest.fixture
async def protected() -> AsyncIterator[tuple[int, GuardStats]]:
    guards = GuardStats()
    gate = AuthGate({"prometheus": bcrypt.hashpw(b"s3cret", bcrypt.gensalt(10))}, guards)
    app = make_app(Config(gpu_enabled=False, host_enabled=False), middlewares=(gate.middleware,), guards=guards)
    limits = ListenLimits()
    runner = web.AppRunner(app, access_log=None, handle_signals=False, **limits.runner_kwargs(guards))
    await runner.setup()
    sock = bind("127.0.0.1:0")
    await GuardedSite(runner, sock, guards, limits).start()
    try:
        yield sock.getsockname()[1], guards
    finally:
        await runner.cleanup()
        gate.close()


async def test_a_wrong_password_flood_cannot_starve_a_login(
    protected: tuple[int, GuardStats], monkeypatch: pytest.MonkeyPatch
) -> None:
    port, guards = protected
    rec = Recorder(monkeypatch)
    url = f"http://127.0.0.1:{port}/metrics"
    # as many connections at once as the listener lets an address never answered have half-open
    connector = aiohttp.TCPConnector(local_addr=("127.0.0.2", 0), limit=MAX_PENDING_PER_CLIENT)
    flooder = aiohttp.ClientSession(connector=connector)
    async with flooder, aiohttp.ClientSession() as prometheus:

        async def wrong(i: int) -> int:
            async with flooder.get(url, headers=_auth("prometheus", f"guess{i}")) as r:
                return r.status

        flood = [asyncio.ensure_future(wrong(i)) for i in range(200)]
        while not rec.hashes:  # the flood holds the bcrypt thread
            await asyncio.sleep(0.01)
        before = len(rec.hashes)
        async with prometheus.get(url, headers=_auth("prometheus", "s3cret")) as r:
            assert r.status == 200
        assert len(rec.hashes) - before <= 2  # at most the flood's one check ran before the login's
        statuses = await asyncio.gather(*flood)
    assert set(statuses) <= {401, 429} and 429 in statuses
    assert guards.rejected[HttpRejectReason.AUTH_BUSY] == statuses.count(429)
    assert len(rec.hashes) < 100  # most of the flood was answered without a bcrypt round


def test_basic_auth_without_tls_is_warned_about(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING)
    webconfig.load(_write(tmp_path, f"basic_auth_users:\n  prometheus: '{HASH5}'\n"))
    assert "clear text" in caplog.text
    caplog.clear()
    webconfig.load(_write(tmp_path, TLS + f"basic_auth_users:\n  prometheus: '{HASH5}'\n"))
    assert "clear text" not in caplog.text


class _Site:
    tls: Any = None


async def test_sighup_reloads_the_users_and_says_so(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    path = _write(tmp_path, f"basic_auth_users:\n  alice: '{HASH5}'\n")
    gate = AuthGate(webconfig.load(path).users)
    reload = WebReload(path, None, gate, _Site())  # type: ignore[arg-type]  # the site's `tls` is all it uses
    try:
        assert await gate.verify("x", "alice", "s3cret") is True
        Path(path).write_text(f"basic_auth_users:\n  bob: '{HASH5}'\n")
        reload.apply(await asyncio.to_thread(reload.parse))
        assert await gate.verify("x", "alice", "s3cret") is False  # the cache was dropped with the users
        assert await gate.verify("x", "bob", "s3cret") is True
        assert "web config reloaded: 1 basic-auth user(s)" in caplog.text
        Path(path).write_text("basic_auth_users: [\n")
        reload.apply(await asyncio.to_thread(reload.parse))
        assert "web config reload failed, keeping the running one" in caplog.text
        assert await gate.verify("y", "bob", "s3cret") is True
        Path(path).write_text(TLS + f"basic_auth_users:\n  bob: '{HASH5}'\n")
        reload.apply(await asyncio.to_thread(reload.parse))
        assert "TLS was not changed (it takes a restart)" in caplog.text
    finally:
        gate.close()


SECRET = "sk-live-SECRET-0123456789"
NO_ECHO = {
    "tag-in-password": f"basic_auth_users:\n  prometheus: !vault '{SECRET}'\n",
    "alias-in-password": f"x: &a '{SECRET}'\nbasic_auth_users:\n  prometheus: *a\n",
    "plain-password": f"basic_auth_users:\n  prometheus: '{SECRET}'\n",
    "list-password": f"basic_auth_users:\n  prometheus: ['{SECRET}']\n",
    "secret-as-key": f"{SECRET}: 1\n",
    "secret-as-user": f"basic_auth_users:\n  '{SECRET}:x': '{HASH5}'\n",
    "bad-yaml": f"basic_auth_users:\n  prometheus: '{SECRET}\n",
    "secret-as-tls-value": f"tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n  min_version: {SECRET}\n",
}


@pytest.mark.parametrize("case", list(NO_ECHO))
def test_errors_name_the_file_and_line_never_the_content(tmp_path: Path, case: str) -> None:
    secret = tmp_path / "secret.txt"
    secret.write_text(NO_ECHO[case])
    link = tmp_path / "web.yml"
    _write(tmp_path, "", "unused.yml")
    link.symlink_to(secret)
    with pytest.raises(webconfig.WebConfigError) as e:
        webconfig.load(str(link))
    msg = str(e.value)
    assert "SECRET" not in msg and "\n" not in msg and str(link) in msg
    assert " line " in msg or case == "secret-as-key"


INVALID = {
    "client-auth-list": (TLS + "  client_auth_type: [a]\n", "client_auth_type must be one of"),
    "min-above-max": (TLS + "  min_version: TLS13\n  max_version: TLS12\n", "max_version TLS12 is below"),
    "version-list": (TLS + "  min_version: [TLS12]\n", "min_version must be one of"),
    "cert-number": ("tls_server_config:\n  cert_file: 5\n  key_file: server.key\n", "cert_file is required"),
    "encrypted-key": (
        "tls_server_config:\n  cert_file: server.crt\n  key_file: server-encrypted.key\n",
        "key_file is encrypted",
    ),
    "user-number": (f"basic_auth_users:\n  1: '{HASH5}'\n", "invalid user name"),
    "http-headers": ("http_server_config:\n  headers: {}\n", "unknown key 'headers'"),
    "typo-top": ("basic_auth_user:\n  a: b\n", "did you mean 'basic_auth_users'?"),
    "typo-tls": ("tls_server_config:\n  cert_fle: server.crt\n", "did you mean 'cert_file'?"),
    "huge": ("#" + "x" * 300_000 + "\n", "cap"),
    "cert-device": ("tls_server_config:\n  cert_file: /dev/zero\n  key_file: server.key\n", "not a regular file"),
    "cert-huge": ("tls_server_config:\n  cert_file: big.pem\n  key_file: server.key\n", "over 1,048,576 bytes"),
}


@pytest.mark.parametrize("case", list(INVALID))
def test_every_invalid_field_is_one_line(tmp_path: Path, case: str) -> None:
    text, msg = INVALID[case]
    (tmp_path / "big.pem").write_bytes(b"-" * (2 << 20))
    with pytest.raises(webconfig.WebConfigError) as e:
        webconfig.load(_write(tmp_path, text))
    assert msg in str(e.value) and "\n" not in str(e.value)


@pytest.mark.parametrize("case", ["client-auth-list", "min-above-max", "encrypted-key"])
def test_serve_exits_2_with_one_line_and_never_prompts(tmp_path: Path, case: str) -> None:
    path = _write(tmp_path, INVALID[case][0])
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "kvoffload_exporter",
            "serve",
            "--target",
            "http://127.0.0.1:1",
            "--web.config.file",
            path,
        ],
        capture_output=True,
        text=True,
        timeout=60,  # a pass-phrase prompt would wait here for a terminal
        stdin=subprocess.DEVNULL,
        start_new_session=True,  # no controlling terminal: OpenSSL's prompt could only fail, never block
    )
    assert r.returncode == 2, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.stderr
    assert INVALID[case][1] in r.stderr


def test_the_dummy_hash_takes_the_highest_configured_cost() -> None:
    users = {"a": bcrypt.hashpw(b"x", bcrypt.gensalt(4)), "b": bcrypt.hashpw(b"x", bcrypt.gensalt(6))}
    assert webauth.dummy_hash(users)[:7] == b"$2b$06$"

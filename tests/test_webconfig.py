"""`--web.config.file` (exporter-toolkit format): TLS and bcrypt basic auth on every endpoint; a bad
file is refused at start with one line."""

from __future__ import annotations

import base64
import ssl
import subprocess
import sys
from pathlib import Path

import aiohttp
import bcrypt
import pytest
from aiohttp.test_utils import TestClient, TestServer

from kvoffload_exporter.config.settings import Config
from kvoffload_exporter.server.app import make_app
from kvoffload_exporter.server.webauth import AuthGate


def basic_auth(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


FIX = Path(__file__).parent / "fixtures" / "webconfig"
HASH = bcrypt.hashpw(b"s3cret", bcrypt.gensalt(4)).decode().replace("$2b$", "$2y$")  # toolkit hashes are $2y$


def _write(tmp_path: Path, text: str) -> str:
    p = tmp_path / "web.yml"
    p.write_text(text)
    for f in FIX.iterdir():
        (tmp_path / f.name).write_bytes(f.read_bytes())
    return str(p)


async def test_basic_auth_protects_every_endpoint(tmp_path: Path) -> None:
    from kvoffload_exporter.config import webconfig

    wc = webconfig.load(_write(tmp_path, f"basic_auth_users:\n  prometheus: '{HASH}'\n"))
    app = make_app(Config(gpu_enabled=False, host_enabled=False), middlewares=(AuthGate(wc.users).middleware,))
    async with TestClient(TestServer(app)) as client:
        for path in ("/metrics", "/healthz", "/", "/nope"):
            r = await client.get(path)
            assert r.status == 401 and r.headers["WWW-Authenticate"].startswith("Basic")
            r = await client.get(path, headers={"Authorization": basic_auth("prometheus", "wrong")})
            assert r.status == 401
            r = await client.get(path, headers={"Authorization": basic_auth("nobody", "s3cret")})
            assert r.status == 401
        for _ in range(2):  # the second answer comes from the verified-pair cache
            r = await client.get("/metrics", headers={"Authorization": basic_auth("prometheus", "s3cret")})
            assert r.status == 200 and b"kvoffload_exporter_build_info" in await r.read()


async def test_tls_with_required_client_certificate(tmp_path: Path) -> None:
    from kvoffload_exporter.config import webconfig

    wc = webconfig.load(
        _write(
            tmp_path,
            "tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n"
            "  client_auth_type: RequireAndVerifyClientCert\n  client_ca_file: ca.crt\n",
        )
    )
    assert wc.ssl_context is not None
    app = make_app(Config(gpu_enabled=False, host_enabled=False))
    server = TestServer(app, host="127.0.0.1")
    await server.start_server(ssl=wc.ssl_context)
    try:
        url = f"https://127.0.0.1:{server.port}/healthz"
        trust = ssl.create_default_context(cafile=str(FIX / "ca.crt"))
        async with aiohttp.ClientSession() as s:
            with pytest.raises(aiohttp.ClientError):  # no client certificate
                async with s.get(url, ssl=trust) as r:
                    await r.read()
            trust.load_cert_chain(str(FIX / "client.crt"), str(FIX / "client.key"))
            async with s.get(url, ssl=trust) as r:
                assert r.status == 200
            with pytest.raises(aiohttp.ClientError):  # plain HTTP is not served
                async with s.get(url.replace("https", "http")) as r:
                    await r.read()
    finally:
        await server.close()


@pytest.mark.parametrize(
    "text,msg",
    [
        ("tls_server_config:\n  cert_file: server.crt\n", "key_file is required"),
        ("tls_server_config:\n  cert_file: nope.crt\n  key_file: server.key\n", "no such file"),
        ("tls_server_config:\n  cert_file: server.key\n  key_file: server.key\n", "cannot load"),
        (
            "tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n  client_auth_type: Maybe\n",
            "client_auth_type",
        ),
        (
            "tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n"
            "  client_auth_type: RequireAndVerifyClientCert\n",
            "client_ca_file is required",
        ),
        ("basic_auth_users:\n  prometheus: plaintext-password\n", "not a bcrypt hash"),
        ("basic_auth_users: [a]\n", "mapping"),
        ("tls_config: {}\n", "unknown key"),
        ("a: [\n", "not valid YAML"),
    ],
)
def test_invalid_web_config_is_refused_with_one_line(tmp_path: Path, text: str, msg: str) -> None:
    from kvoffload_exporter.config import webconfig

    with pytest.raises(webconfig.WebConfigError) as err:
        webconfig.load(_write(tmp_path, text))
    assert msg in str(err.value) and "\n" not in str(err.value)
    assert "plaintext-password" not in str(err.value)


def test_serve_refuses_an_invalid_web_config_at_start_with_one_line(tmp_path: Path) -> None:
    path = _write(tmp_path, "basic_auth_users:\n  prometheus: plaintext-password\n")
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
        timeout=60,
    )
    assert r.returncode == 2 and "listening" not in r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "not a bcrypt hash" in lines[0], r.stderr
    assert "Traceback" not in r.stderr and "plaintext-password" not in r.stderr

"""A target that echoes the credentials the exporter sends it (its `Authorization` header, in any
spelling) exports none of them: not in a label value, the landing page, `/probe`, nor a log line."""

from __future__ import annotations

import base64
import logging
from collections.abc import Callable
from urllib.parse import quote

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer
from conftest import fixture_text
from support.polls import metrics_after_polls

from kvoffload_exporter.config.credentials import BasicAuth, BearerToken
from kvoffload_exporter.config.settings import Config, TargetConfig
from kvoffload_exporter.redact import Scrubber
from kvoffload_exporter.server.app import make_app

GOOD = fixture_text("h200-0.6b/A_12_final.prom")
TOKEN = "tok-9f8e7d6c5b4a"
USER, PASSWORD = "scraper", "pa ss/w0rd!"
PAIR = f"{USER}:{PASSWORD}"

Echo = Callable[[str], str]
"""The `Authorization` header the target received → what it puts into `model_name`."""


def _after_scheme(h: str) -> str:
    return h.split(" ", 1)[1]


def _b64(s: str) -> str:
    return base64.b64encode(s.encode()).decode()


BEARER_ECHOES: dict[str, Echo] = {
    "header": lambda h: h,  # `Bearer tok...`
    "raw": _after_scheme,
    "url-encoded": lambda h: quote(_after_scheme(h), safe=""),
    "base64": lambda h: _b64(_after_scheme(h)),
    "base64-of-header": _b64,
    "hex": lambda h: _after_scheme(h).encode().hex(),
}
BASIC_ECHOES: dict[str, Echo] = {
    "header": lambda h: h,  # `Basic <base64 of user:password>`
    "base64": _after_scheme,
    "user:password": lambda h: base64.b64decode(_after_scheme(h)).decode(),
    "url-encoded": lambda h: quote(base64.b64decode(_after_scheme(h)).decode(), safe=""),
    "password": lambda h: base64.b64decode(_after_scheme(h)).decode().partition(":")[2],
    "base64-inside-json": lambda h: _b64('{"auth": "' + base64.b64decode(_after_scheme(h)).decode() + '"}'),
}


def _forbidden(token: str | None) -> list[str]:
    """The secrets a test looks for, in the spellings the echoes use."""
    if token:
        return [token, quote(token, safe=""), _b64(token)[:-4], token.encode().hex()]
    return [PASSWORD, quote(PASSWORD, safe=""), _b64(PAIR)[:-4], quote(PAIR, safe="")]


class EchoTarget:
    def __init__(self, echo: Echo, where: str = "label") -> None:
        self.echo, self.where = echo, where
        self.server: TestServer | None = None

    async def handle(self, request: web.Request) -> web.Response:
        said = self.echo(request.headers.get("Authorization", ""))
        if request.path == "/version":
            return web.Response(text="0.26.0")
        if self.where == "error":  # a malformed line quoting it: the poll fails, the detail is logged
            return web.Response(
                text=f'vllm:prefix_cache_hits_total{{model_name="{said}"}} x\n', content_type="text/plain"
            )
        return web.Response(text=GOOD.replace("Qwen/Qwen3-0.6B", said), content_type="text/plain")

    async def __aenter__(self) -> str:
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self.handle)
        self.server = TestServer(app, host="127.0.0.1")
        await self.server.start_server()
        return f"http://127.0.0.1:{self.server.port}"

    async def __aexit__(self, *exc: object) -> None:
        assert self.server is not None
        await self.server.close()


async def _outputs(target: TargetConfig) -> tuple[str, str, str]:
    config = Config(
        targets=(target,), poll_interval=0.05, timeout=1.0, gpu_enabled=False, window=10.0, probe_allow=(target.url,)
    )
    async with TestClient(TestServer(make_app(config))) as client:
        metrics = await metrics_after_polls(client)
        page = await (await client.get("/")).text()
        probe = await (await client.get("/probe", params={"target": target.url})).text()
    return metrics, page, probe


@pytest.mark.parametrize("form", sorted(BEARER_ECHOES))
async def test_echoed_bearer_token_never_exported(form: str, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    async with EchoTarget(BEARER_ECHOES[form]) as url:
        metrics, page, probe = await _outputs(TargetConfig(url=url, name="a", auth=BearerToken(TOKEN)))
    assert 'kvoffload_up{target="a"} 1.0' in metrics and "<redacted>" in metrics
    for out in (metrics, page, probe, caplog.text):
        for secret in _forbidden(TOKEN):
            assert secret not in out


@pytest.mark.parametrize("form", sorted(BASIC_ECHOES))
@pytest.mark.parametrize("source", ["password_file", "userinfo"])
async def test_echoed_basic_credentials_never_exported(
    form: str, source: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    async with EchoTarget(BASIC_ECHOES[form]) as url:
        if source == "userinfo":
            target = TargetConfig(url=url.replace("//", f"//{quote(USER)}:{quote(PASSWORD, safe='')}@"), name="a")
        else:
            target = TargetConfig(url=url, name="a", auth=BasicAuth(USER, PASSWORD))
        metrics, page, probe = await _outputs(target)
    assert 'kvoffload_up{target="a"} 1.0' in metrics and "<redacted>" in metrics
    for out in (metrics, page, probe, caplog.text):
        for secret in _forbidden(None):
            assert secret not in out


@pytest.mark.parametrize("form", ["header", "base64"])
async def test_a_malformed_line_echoing_the_credential_is_logged_without_it(
    form: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    async with EchoTarget(BASIC_ECHOES[form], where="error") as url:
        metrics, _, _ = await _outputs(TargetConfig(url=url, name="a", auth=BasicAuth(USER, PASSWORD)))
    assert 'kvoffload_up{target="a"} 0.0' in metrics
    assert "target a" in caplog.text
    for secret in _forbidden(None):
        assert secret not in caplog.text


async def test_a_version_that_is_the_token_is_not_exported() -> None:
    class VersionEcho(EchoTarget):
        async def handle(self, request: web.Request) -> web.Response:
            if request.path == "/version":
                return web.Response(text=_after_scheme(request.headers["Authorization"]))
            return await super().handle(request)

    async with VersionEcho(lambda h: "m") as url:
        metrics, _, _ = await _outputs(TargetConfig(url=url, name="a", auth=BearerToken(TOKEN)))
    assert TOKEN not in metrics and 'vllm_version="unknown"' in metrics


def test_scrubber_finds_base64_at_any_alignment_and_short_secrets_are_left_alone() -> None:
    s = Scrubber([TOKEN])
    for prefix in ("", "x", "xy", "xyz"):
        encoded = _b64(f"{prefix}{TOKEN} and more")
        assert "<redacted>" in s(encoded), prefix
    assert s(TOKEN.encode().hex().upper()) == "<redacted>"
    assert Scrubber(["abc"])("abc 1234") == "abc 1234"  # under 4 characters: would blank ordinary text

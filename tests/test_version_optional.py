"""`/version` is optional: a broken, huge or hostile answer leaves a good target up with version
`unknown`, counted in kvoffload_exporter_version_errors_total; never a 60 KB label."""

from __future__ import annotations

import asyncio

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer
from conftest import fixture_text

from kvoffload_exporter.config.settings import Config, TargetConfig
from kvoffload_exporter.server.app import EXPORTER, make_app
from kvoffload_exporter.sources.version import VersionError, parse_version

GOOD = fixture_text("h200-0.6b/A_12_final.prom")

HOSTILE: dict[str, tuple[int, bytes, str]] = {
    "nested": (200, b"[" * 60_000, "too_large"),
    "nested-small": (200, b"[" * 4000, "parse"),
    "huge-version": (200, b'{"version": "' + b"1" * 60_000 + b'"}', "too_large"),
    "long-version": (200, b'{"version": "' + b"1" * 200 + b'"}', "parse"),
    "control-chars": (200, b'{"version": "0.1\\r\\n\\u001b[31mred"}', "parse"),
    "not-json": (200, b"<html>", "parse"),
    "number": (200, b'{"version": 7}', "parse"),
    "404": (404, b"", "http_status"),
}


@pytest.mark.parametrize("body,reason", [(b, r) for _, b, r in HOSTILE.values()], ids=list(HOSTILE))
def test_parse_version_refuses_what_is_not_a_short_version(body: bytes, reason: str) -> None:
    if reason == "http_status":
        return
    with pytest.raises(VersionError) as e:
        parse_version(body)
    assert e.value.reason == reason


def test_parse_version_accepts_real_versions() -> None:
    assert parse_version(b'{"version": "0.11.0"}') == "0.11.0"
    assert parse_version(b'{"version": "0.10.2.dev123+g1234abcd.d20250101"}') == "0.10.2.dev123+g1234abcd.d20250101"


def _series(text: str, name: str, reason: str) -> float:
    for line in text.splitlines():
        if line.startswith(f'{name}{{reason="{reason}"}}'):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"{name}{{reason={reason}}} missing")


@pytest.mark.parametrize("case", list(HOSTILE))
async def test_a_bad_version_leaves_the_target_up(case: str) -> None:
    status, body, reason = HOSTILE[case]

    async def metrics(request: web.Request) -> web.Response:
        return web.Response(text=GOOD, content_type="text/plain")

    async def version(request: web.Request) -> web.Response:
        return web.Response(status=status, body=body, content_type="application/json")

    upstream_app = web.Application()
    upstream_app.router.add_get("/metrics", metrics)
    upstream_app.router.add_get("/version", version)
    upstream = TestServer(upstream_app)
    await upstream.start_server()
    config = Config(
        targets=(TargetConfig(url=f"http://127.0.0.1:{upstream.port}", name="a"),),
        poll_interval=0.05,
        timeout=0.5,
        gpu_enabled=False,
        host_enabled=False,
        window=10.0,
    )
    client = TestClient(TestServer(make_app(config)))
    await client.start_server()
    try:
        before = _series(await (await client.get("/metrics")).text(), "kvoffload_exporter_version_errors_total", reason)
        exp = client.server.app[EXPORTER]
        for _ in range(500):  # bounded: 10 s at most
            if exp.targets[0].polls >= 2:
                break
            await asyncio.sleep(0.02)
        exp.render()
        await asyncio.sleep(0.06)
        text = await (await client.get("/metrics")).text()
        assert 'kvoffload_up{target="a"} 1.0' in text
        info = next(line for line in text.splitlines() if line.startswith("kvoffload_target_info{"))
        assert 'vllm_version="unknown"' in info and len(info) < 200
        assert _series(text, "kvoffload_exporter_version_errors_total", reason) > before
        assert 'kvoffload_scrape_errors_total{target="a",reason="internal"} 0.0' in text
    finally:
        await client.close()
        await upstream.close()

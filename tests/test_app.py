"""The serve app against a fake vLLM with failure modes: `up` is honest and the exporter keeps serving."""

from __future__ import annotations

import asyncio
import shutil
import subprocess

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer
from conftest import fixture_text

from kvoffload_exporter.config.settings import Config, TargetConfig
from kvoffload_exporter.server.app import EXPORTER, make_app

GOOD = fixture_text("h200-0.6b/A_12_final.prom")


class FakeVllm:
    """Serves a capture on /metrics and misbehaves on request."""

    def __init__(self) -> None:
        self.mode = "ok"
        self.body = GOOD

    async def metrics(self, request: web.Request) -> web.StreamResponse:
        if self.mode == "500":
            return web.Response(status=500, text="boom")
        if self.mode == "slow":
            await asyncio.sleep(2)
        if self.mode == "html":
            return web.Response(text="<html>login</html>", content_type="text/html")
        if self.mode == "huge":
            return web.Response(text="# x\n" * 400_000, content_type="text/plain")
        if self.mode == "truncated":
            return web.Response(text=self.body[: len(self.body) // 2], content_type="text/plain")
        if self.mode == "cut":  # connection dropped mid-body: declared length is never reached
            resp = web.StreamResponse(headers={"Content-Length": str(len(self.body))})
            await resp.prepare(request)
            await resp.write(self.body[:1000].encode())
            request.transport.close()  # type: ignore[union-attr]
            return resp
        if self.mode == "garbage":
            return web.Response(text="hello\n", content_type="text/plain")
        if self.mode == "badvalue":
            return web.Response(
                text='vllm:prefix_cache_hits_total{engine="0",model_name="m"} x\n', content_type="text/plain"
            )
        return web.Response(text=self.body, content_type="text/plain")

    async def version(self, request: web.Request) -> web.Response:
        return web.json_response({"version": "0.26.0"})

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_get("/metrics", self.metrics)
        app.router.add_get("/version", self.version)
        return app


async def _start(fake: FakeVllm, **cfg: object) -> tuple[TestServer, TestClient, str]:
    upstream = TestServer(fake.app())
    await upstream.start_server()
    url = f"http://127.0.0.1:{upstream.port}"
    config = Config(
        targets=(TargetConfig(url=url, name="a"),),
        poll_interval=0.05,
        timeout=0.5,
        max_body_bytes=1_000_000,
        gpu_enabled=False,
        window=10.0,
        **cfg,
    )  # type: ignore[arg-type]
    client = TestClient(TestServer(make_app(config)))
    await client.start_server()
    return upstream, client, url


async def _metrics_after_polls(client: TestClient, polls: int = 3) -> str:
    exp = client.server.app[EXPORTER]
    start = exp.targets[0].polls
    for _ in range(400):
        if exp.targets[0].polls >= start + polls:
            break
        await asyncio.sleep(0.02)
    resp = await client.get("/metrics")
    assert resp.status == 200
    assert resp.headers["Content-Type"].startswith("text/plain; version=0.0.4")
    return await resp.text()


@pytest.mark.parametrize(
    "mode,reason",
    [
        ("500", "http_status"),
        ("slow", "timeout"),
        ("html", "content_type"),
        ("huge", "too_large"),
        ("truncated", "truncated"),
        ("cut", "truncated"),
        ("garbage", "parse"),
        ("badvalue", "parse"),
    ],
)
async def test_failures_set_up_zero_with_reason(mode: str, reason: str) -> None:
    fake = FakeVllm()
    upstream, client, _ = await _start(fake)
    try:
        text = await _metrics_after_polls(client)
        assert 'kvoffload_up{target="a"} 1.0' in text
        assert 'kvoffload_state{target="a",model_name="Qwen/Qwen3-0.6B",engine="0",state="idle"} 1.0' in text
        fake.mode = mode
        text = await _metrics_after_polls(client, 2)
        assert 'kvoffload_up{target="a"} 0.0' in text
        errors = {
            line.split("reason=")[1].split('"')[1]: float(line.rsplit(" ", 1)[1])
            for line in text.splitlines()
            if line.startswith("kvoffload_scrape_errors_total{")
        }
        assert errors[reason] >= 1
        # A slow target's poll that has not finished within the staleness bound also counts `stale` (a
        # busy 2-core machine makes that happen): legitimate for it, and for no other failure.
        allowed = {reason, "stale"} if reason == "timeout" else {reason}
        assert sum(v for k, v in errors.items() if k not in allowed) == 0, errors
        assert "kvoffload_load_bytes_total" not in text  # a failed source omits its series
        assert 'kvoffload_exporter_collector_success{collector="vllm"} 0.0' in text
        fake.mode = "ok"  # and it recovers
        text = await _metrics_after_polls(client, 2)
        assert 'kvoffload_up{target="a"} 1.0' in text
    finally:
        await client.close()
        await upstream.close()


async def test_target_down_and_pages() -> None:
    config = Config(
        targets=(TargetConfig(url="http://127.0.0.1:9", name="gone"),),
        poll_interval=0.05,
        timeout=0.5,
        gpu_enabled=False,
        window=10.0,
    )
    async with TestClient(TestServer(make_app(config))) as client:
        text = await _metrics_after_polls(client, 2)
        assert 'kvoffload_up{target="gone"} 0.0' in text
        assert 'kvoffload_scrape_errors_total{target="gone",reason="connect"}' in text
        assert (await client.get("/healthz")).status == 200
        page = await (await client.get("/")).text()
        assert "gone" in page and "down (connect)" in page


async def test_values_and_version_exported() -> None:
    fake = FakeVllm()
    upstream, client, _ = await _start(fake)
    try:
        text = await _metrics_after_polls(client)
        assert 'kvoffload_target_info{target="a",vllm_version="0.26.0",generation="flat"} 1.0' in text
        assert ('kvoffload_load_bytes_total{target="a",model_name="Qwen/Qwen3-0.6B",engine="0"} 14804844544.0') in text
        fake.body = fixture_text("h200-0.6b/B_08_final.prom")
        text = await _metrics_after_polls(client)
        assert 'state="not_configured"} 1.0' in text
        assert "kvoffload_load_bytes_total" not in text
    finally:
        await client.close()
        await upstream.close()


async def test_restart_yields_no_negative_window_values() -> None:
    fake = FakeVllm()
    upstream, client, _ = await _start(fake)
    try:
        await _metrics_after_polls(client)
        fake.body = fixture_text("h200-0.6b/A_00_initial.prom")  # counters go back: a restart
        text = await _metrics_after_polls(client, 2)
        ratios = [
            float(line.rsplit(" ", 1)[1])
            for line in text.splitlines()
            if line.startswith(("kvoffload_load_store_ratio", "kvoffload_store_bandwidth"))
        ]
        assert all(v >= 0 for v in ratios)
        exp = client.server.app[EXPORTER]
        d = exp.targets[0].view.derived[("Qwen/Qwen3-0.6B", "0")]
        assert all(v >= 0 for v in d.deltas.values())
        assert d.deltas["offload_store_bytes"] <= 7340032  # the restarted engine's own bytes, no spike
    finally:
        await client.close()
        await upstream.close()


@pytest.mark.skipif(not shutil.which("promtool"), reason="promtool not installed")
async def test_exposition_passes_promtool() -> None:
    fake = FakeVllm()
    upstream, client, _ = await _start(fake)
    try:
        text = await _metrics_after_polls(client)
        res = subprocess.run(["promtool", "check", "metrics"], input=text, capture_output=True, text=True)
        assert res.returncode == 0, res.stdout + res.stderr
    finally:
        await client.close()
        await upstream.close()


async def test_unexpected_error_marks_target_down_and_polling_continues(monkeypatch: pytest.MonkeyPatch) -> None:
    import kvoffload_exporter.server.targetpoller as poller

    real = poller.normalise
    broken = {"on": False}

    def flaky(text: str, *rest):  # type: ignore[no-untyped-def]
        if broken["on"]:
            raise RuntimeError("bug")
        return real(text, *rest)

    monkeypatch.setattr(poller, "normalise", flaky)
    fake = FakeVllm()
    upstream, client, _ = await _start(fake)
    try:
        await _metrics_after_polls(client)
        broken["on"] = True
        text = await _metrics_after_polls(client, 2)
        assert 'kvoffload_up{target="a"} 0.0' in text
        assert 'kvoffload_scrape_errors_total{target="a",reason="internal"} 0.0' not in text
        broken["on"] = False
        text = await _metrics_after_polls(client, 2)
        assert 'kvoffload_up{target="a"} 1.0' in text  # the poll task survived
    finally:
        await client.close()
        await upstream.close()

"""The HTTP side of a hostile or misconfigured target: redirects stay within the target's origin,
credentials go only to the target, and URL userinfo never reaches a label, page or log."""

from __future__ import annotations

import logging

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer
from conftest import fixture_text
from support.polls import metrics_after_polls

from kvoffload_exporter.config.settings import Config, TargetConfig
from kvoffload_exporter.server.app import make_app
from kvoffload_exporter.sources.vllm_http import ScrapeError, fetch_metrics, fetch_version

GOOD = fixture_text("h200-0.6b/A_12_final.prom")


class Upstream:
    """A server that records what it was asked and answers from a route table."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, str | None]] = []  # (path, Authorization)
        self.routes: dict[str, web.Response | str] = {}
        self.server: TestServer | None = None

    async def handle(self, request: web.Request) -> web.StreamResponse:
        self.seen.append((request.path, request.headers.get("Authorization")))
        r = self.routes.get(request.path)
        if isinstance(r, str):  # a redirect target
            raise web.HTTPFound(r)
        if r is None:
            return web.Response(text=GOOD, content_type="text/plain")
        return r

    async def start(self) -> str:
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self.handle)
        self.server = TestServer(app, host="127.0.0.1")
        await self.server.start_server()
        return f"http://127.0.0.1:{self.server.port}"

    async def close(self) -> None:
        assert self.server is not None
        await self.server.close()


@pytest.fixture
async def pair():  # type: ignore[no-untyped-def]
    target, other = Upstream(), Upstream()
    urls = await target.start(), await other.start()
    yield target, other, urls
    await target.close()
    await other.close()


async def test_redirect_to_another_origin_is_not_followed(pair) -> None:  # type: ignore[no-untyped-def]
    target, other, (url, other_url) = pair
    target.routes["/metrics"] = f"http://user:hunter2@127.0.0.1:{other_url.rsplit(':', 1)[1]}/metrics?token=abc"
    async with aiohttp.ClientSession() as s:
        with pytest.raises(ScrapeError) as err:
            await fetch_metrics(s, url, 2.0, 1 << 24)
    assert err.value.reason == "redirect"
    assert other.seen == []
    assert "127.0.0.1" in err.value.detail and "hunter2" not in err.value.detail and "abc" not in err.value.detail


async def test_redirect_followed_only_within_the_origin_scheme_included(pair) -> None:  # type: ignore[no-untyped-def]
    target, _other, (url, _) = pair
    target.routes["/metrics"] = "/real/metrics"
    async with aiohttp.ClientSession() as s:
        assert "vllm:" in await fetch_metrics(s, url, 2.0, 1 << 24)
        # ... but the scheme is part of the origin: https on the same host and port is another one.
        target.routes["/metrics"] = url.replace("http://", "https://") + "/metrics"
        with pytest.raises(ScrapeError, match="redirect"):
            await fetch_metrics(s, url, 2.0, 1 << 24)
    assert [p for p, _ in target.seen] == ["/metrics", "/real/metrics", "/metrics"]


async def test_version_redirect_to_another_origin_is_not_followed_and_logged_redacted(pair, caplog) -> None:  # type: ignore[no-untyped-def]
    target, other, (url, other_url) = pair
    other.routes["/version"] = web.json_response({"version": "6.6.6"})
    target.routes["/version"] = other_url.replace("http://", "http://u:pw1234@") + "/version"
    caplog.set_level(logging.WARNING)
    async with aiohttp.ClientSession() as s:
        assert await fetch_version(s, url, 2.0) is None
    assert other.seen == []
    assert "another origin" in caplog.text and "pw1234" not in caplog.text


async def test_credentials_sent_to_the_target_only(pair) -> None:  # type: ignore[no-untyped-def]
    target, other, (url, other_url) = pair
    async with aiohttp.ClientSession() as s:
        await fetch_metrics(s, url.replace("http://", "http://alice:pa%3Ass@"), 2.0, 1 << 24)
        await fetch_metrics(s, url, 2.0, 1 << 24, auth=("bob", "pw"))
        await fetch_metrics(s, url, 2.0, 1 << 24, auth="tok123")
        target.routes["/metrics"] = other_url + "/metrics"
        with pytest.raises(ScrapeError):
            await fetch_metrics(s, url, 2.0, 1 << 24, auth="tok123")
    auth = [a for _, a in target.seen]
    assert auth[0] == "Basic YWxpY2U6cGE6c3M="  # alice:pa:ss, percent-decoded
    assert auth[1] == "Basic Ym9iOnB3" and auth[2] == "Bearer tok123"
    assert other.seen == []


async def test_redirect_is_a_closed_scrape_error_reason(pair) -> None:  # type: ignore[no-untyped-def]
    target, other, (url, other_url) = pair
    target.routes["/metrics"] = other_url + "/metrics"
    config = Config(
        targets=(TargetConfig(url=url, name="a"),), poll_interval=0.05, timeout=0.5, gpu_enabled=False, window=10.0
    )
    async with TestClient(TestServer(make_app(config))) as client:
        text = await metrics_after_polls(client)
    line = next(
        x for x in text.splitlines() if x.startswith('kvoffload_scrape_errors_total{target="a",reason="redirect"}')
    )
    assert float(line.rsplit(" ", 1)[1]) >= 2
    assert 'kvoffload_up{target="a"} 0.0' in text
    assert other.seen == []


async def test_url_userinfo_never_in_labels_page_or_logs(caplog) -> None:  # type: ignore[no-untyped-def]
    caplog.set_level(logging.INFO)
    url = "http://scraper:topsecret@127.0.0.1:9"  # nothing listens: the poll fails and is logged
    config = Config(targets=(TargetConfig(url=url),), poll_interval=0.05, timeout=0.5, gpu_enabled=False, window=10.0)
    async with TestClient(TestServer(make_app(config))) as client:
        metrics = await metrics_after_polls(client)
        page = await (await client.get("/")).text()
    assert 'kvoffload_up{target="127.0.0.1:9"} 0.0' in metrics
    for text in (metrics, page, caplog.text):
        assert "topsecret" not in text and "scraper" not in text


async def test_canary_requests_never_follow_a_redirect(pair) -> None:  # type: ignore[no-untyped-def]
    from kvoffload_exporter.canary.wire.client import CanaryClient
    from kvoffload_exporter.canary.wire.secrets import ApiKey

    target, other, (url, other_url) = pair
    target.routes["/v1/completions"] = other_url + "/v1/completions"
    target.routes["/v1/models"] = other_url + "/v1/models"
    async with aiohttp.ClientSession() as s:
        c = CanaryClient(s, api_key=ApiKey("sk-canary"))
        out = await c.complete(url, {"prompt": "x", "max_tokens": 1, "stream": True})
        status, _ = await c.get(url, "/v1/models")
    assert out.status == 302 and status == 302
    assert other.seen == []

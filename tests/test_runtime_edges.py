"""Smaller runtime edges a hostile party found: a wall clock set back, cookies carried between targets,
OpenMetrics bodies cut or prefixed at `# EOF`, one family typed twice, an untrusted certificate named as
such, zero-token completions timed as TTFT, and the simulator's answers to a 100k-deep body and to
token ids past int64. Real loopback servers; no timed assertions."""

from __future__ import annotations

import json
import ssl
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer
from conftest import fixture_text
from support.polls import metrics_after_polls

from kvoffload_exporter.canary.wire.protocol import Completion, CompletionStream
from kvoffload_exporter.config.settings import Config, TargetConfig
from kvoffload_exporter.server.app import make_app
from kvoffload_exporter.server.targetpoller import TargetPoller
from kvoffload_exporter.sim.server import make_app as sim_app
from kvoffload_exporter.sim.simulator import SimOptions, Simulator
from kvoffload_exporter.sources.vllm_http import ScrapeError, fetch_metrics

GOOD = fixture_text("h200-0.6b/A_12_final.prom")
FIX = Path(__file__).parent / "fixtures" / "webconfig"
OM = "application/openmetrics-text; version=1.0.0; charset=utf-8"


class Target:
    """Answers `/metrics` with `body` and `ctype`, records the Cookie header, sets a cookie."""

    def __init__(self, body: str = GOOD, ctype: str = "text/plain") -> None:
        self.body, self.ctype = body, ctype
        self.cookies: list[str | None] = []
        self.server: TestServer | None = None

    async def handle(self, request: web.Request) -> web.Response:
        self.cookies.append(request.headers.get("Cookie"))
        r = web.Response(text=self.body, headers={"Content-Type": self.ctype})
        r.set_cookie("session", f"from-{request.url.port}", domain=None, path="/")
        return r

    async def start(self, tls: ssl.SSLContext | None = None) -> str:
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self.handle)
        self.server = TestServer(app, host="127.0.0.1", ssl=tls) if tls else TestServer(app, host="127.0.0.1")
        await self.server.start_server(ssl=tls) if tls else await self.server.start_server()
        return f"{'https' if tls else 'http'}://127.0.0.1:{self.server.port}"

    async def close(self) -> None:
        assert self.server is not None
        await self.server.close()


class Clock:
    def __init__(self, t: float) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


async def test_a_wall_clock_set_back_an_hour_never_makes_a_window_negative() -> None:
    target = Target()
    url = await target.start()
    wall, mono = Clock(1_800_000_000.0), Clock(100.0)
    cfg = Config(gpu_enabled=False, host_enabled=False, poll_interval=5.0, window=60.0)
    poller = TargetPoller(TargetConfig(url=url, name="t"), cfg, clock=wall, timer=mono)
    windows: list[float] = []
    try:
        async with aiohttp.ClientSession() as session:
            for i in range(30):
                wall.t += -3600.0 if i == 10 else 5.0
                mono.t += 5.0
                await poller.poll_once(session)
                windows += [d.window_seconds for d in poller.view.derived.values()]
    finally:
        await target.close()
    assert windows and min(windows) >= 0.0, windows
    assert windows[-1] > 0.0
    assert poller.view.last_success == wall.t  # what Prometheus compares with time(): the wall clock


async def test_a_cookie_one_target_sets_is_never_sent_to_another() -> None:
    a, b = Target(), Target()
    urls = await a.start(), await b.start()
    cfg = Config(
        targets=(TargetConfig(url=urls[0], name="a"), TargetConfig(url=urls[1], name="b")),
        gpu_enabled=False,
        host_enabled=False,
        poll_interval=0.05,
        timeout=1.0,
    )
    try:
        async with TestClient(TestServer(make_app(cfg))) as client:
            await metrics_after_polls(client, polls=3)
    finally:
        await a.close()
        await b.close()
    assert len(a.cookies) >= 3 and len(b.cookies) >= 3
    assert a.cookies == [None] * len(a.cookies) and b.cookies == [None] * len(b.cookies)


@pytest.mark.parametrize(
    ("body", "why"),
    [
        ("# EOF\n" + GOOD + "# EOF\n", "# EOF before the end"),
        ("# EOF\n" + GOOD, "without # EOF"),
        (GOOD, "without # EOF"),
        (GOOD + "# EOF\n" + GOOD + "# EOF\n", "# EOF before the end"),
    ],
)
async def test_an_openmetrics_body_without_its_eof_at_the_end_is_a_parse_error(body: str, why: str) -> None:
    target = Target(body, OM)
    url = await target.start()
    try:
        async with aiohttp.ClientSession() as session:
            with pytest.raises(ScrapeError) as err:
                await fetch_metrics(session, url, 2.0, 1 << 24)
            target.body = GOOD + "# EOF\n"
            assert "vllm:" in await fetch_metrics(session, url, 2.0, 1 << 24)
    finally:
        await target.close()
    assert err.value.reason == "parse" and why in err.value.detail


async def test_one_family_typed_twice_differently_is_up_0_parse() -> None:
    body = GOOD + "# TYPE vllm:kv_offload_size counter\n"
    assert "# TYPE vllm:kv_offload_size histogram" in GOOD
    target = Target(body)
    url = await target.start()
    cfg = Config(targets=(TargetConfig(url=url, name="t"),), gpu_enabled=False, host_enabled=False, poll_interval=0.05)
    try:
        async with TestClient(TestServer(make_app(cfg))) as client:
            text = await metrics_after_polls(client)
    finally:
        await target.close()
    assert 'kvoffload_up{target="t"} 0.0' in text
    assert 'kvoffload_scrape_errors_total{target="t",reason="parse"} 0.0' not in text


async def test_an_untrusted_certificate_is_a_tls_error_in_words() -> None:
    tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    tls.load_cert_chain(str(FIX / "server.crt"), str(FIX / "server.key"))
    target = Target()
    url = await target.start(tls)
    try:
        async with aiohttp.ClientSession() as session:
            with pytest.raises(ScrapeError) as err:
                await fetch_metrics(session, url, 2.0, 1 << 24)
    finally:
        await target.close()
    assert err.value.reason == "tls", err.value
    assert "certificate" in err.value.detail and "not permitted" not in err.value.detail.lower()


def test_a_zero_token_completion_is_never_a_ttft_sample() -> None:
    s = CompletionStream(Completion(status=200))
    choice = {"choices": [{"index": 0, "text": "", "finish_reason": "length"}]}
    usage = {"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 0}}
    s.feed(b"".join(b"data: " + json.dumps(e).encode() + b"\n\n" for e in (choice, usage)) + b"data: [DONE]\n\n", 0.2)
    c = s.finish(1.0)
    assert c.ttft_token is None and not c.ok and "completion_tokens is 0" in c.detail


@pytest.mark.parametrize(
    "body",
    [
        b'{"prompt": ' + b"[" * 100_000 + b"]" * 100_000 + b"}",
        json.dumps({"prompt": [1, 2**63], "max_tokens": 1}).encode(),
        json.dumps({"prompt": [1, 2**70], "max_tokens": 1}).encode(),
    ],
)
async def test_the_simulator_answers_400_to_a_deep_body_and_ids_past_int64(aiohttp_client: Any, body: bytes) -> None:
    client = await aiohttp_client(sim_app(Simulator(SimOptions(time_scale=0.01, seed=3))))
    resp = await client.post("/v1/completions", data=body, headers={"Content-Type": "application/json"})
    assert resp.status == 400
    assert "Traceback" not in await resp.text()


async def test_the_simulator_reads_a_huge_w_number_as_an_ordinary_word(aiohttp_client: Any) -> None:
    client = await aiohttp_client(sim_app(Simulator(SimOptions(time_scale=0.01, seed=3))))
    for prompt in ("w" + "9" * 5000 + " w1", "w99999999999999999999 w1", "w²"):
        resp = await client.post("/v1/completions", json={"prompt": prompt, "max_tokens": 1})
        assert resp.status in (200, 400), prompt

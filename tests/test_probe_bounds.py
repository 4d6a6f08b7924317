"""`/probe` creates bounded state: one target per normalised URL whatever `name=` says, at most
`probe.max_targets` (LRU, counted), its own poll slots so configured targets keep their schedule, capped
names and URLs, and an allow_regex matched in linear time. Real loopback servers throughout."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import replace

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer
from conftest import fixture_text

from kvoffload_exporter.config.settings import Config, ConfigError, TargetConfig, from_mapping
from kvoffload_exporter.enums import ProbeEviction
from kvoffload_exporter.server.app import EXPORTER, GUARDS, make_app
from kvoffload_exporter.server.probe import normalise_url

BODY = fixture_text("h200-0.6b/A_12_final.prom")
BASE = Config(gpu_enabled=False, host_enabled=False, poll_interval=5.0, timeout=5.0)


class Upstream:
    """Any path ending in /metrics serves a capture; paths under /slow/ wait until released."""

    def __init__(self) -> None:
        self.requests = 0
        self.release = asyncio.Event()

    async def handle(self, request: web.Request) -> web.Response:
        if request.path.endswith("/version"):
            return web.json_response({"version": "0.26.0"})
        self.requests += 1
        if request.path.startswith("/slow/"):
            await self.release.wait()
        return web.Response(text=BODY, content_type="text/plain")

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_get("/{tail:.*}", self.handle)
        return app


@pytest.fixture
async def upstream() -> AsyncIterator[tuple[Upstream, str]]:
    up = Upstream()
    server = TestServer(up.app())
    await server.start_server()
    try:
        yield up, f"http://127.0.0.1:{server.port}"
    finally:
        up.release.set()
        await server.close()


async def _client(cfg: Config) -> TestClient:
    client = TestClient(TestServer(make_app(cfg)))
    await client.start_server()
    return client


def test_normalised_urls_are_one_spelling() -> None:
    assert normalise_url("HTTP://Vllm-1:80/") == "http://vllm-1"
    assert normalise_url("https://h:443//") == "https://h"
    assert normalise_url(" http://h:8000/x/ ") == "http://h:8000/x"
    assert normalise_url("http://u:p@h:8000") == "http://u:p@h:8000"  # left as is: refused by allowed()


async def test_names_cannot_multiply_a_target(upstream: tuple[Upstream, str]) -> None:
    up, url = upstream
    client = await _client(from_mapping({"probe": {"allow": [url]}}, BASE))
    try:
        spellings = [url, url + "/", url.upper().replace("HTTP://", "http://"), url.replace("http", "HTTP")]
        for i in range(200):
            r = await client.get("/probe", params={"target": spellings[i % 4], "name": f"n{i}"})
            assert r.status == 200
        exp = client.server.app[EXPORTER]
        assert list(exp.probed) == [url]
        assert up.requests == 1  # within half an interval every probe shares the first poll
        assert 'kvoffload_targets{kind="probed"} 1.0' in exp.body.decode()
    finally:
        await client.close()


async def test_a_probe_only_replica_counts_its_probed_targets_up(upstream: tuple[Upstream, str]) -> None:
    """A sharded replica has no `targets:`: its targets_up is the shard it serves, not 0."""
    _, url = upstream
    client = await _client(from_mapping({"probe": {"allow": [url]}}, BASE))
    try:
        assert (await client.get("/probe", params={"target": url})).status == 200
        text = await (await client.get("/metrics")).text()
        assert "\nkvoffload_targets_up 1.0\n" in text
        assert 'kvoffload_targets{kind="configured"} 0.0' in text
    finally:
        await client.close()


async def test_probed_targets_are_capped_lru_and_counted(upstream: tuple[Upstream, str]) -> None:
    _, url = upstream
    cfg = from_mapping({"probe": {"allow_regex": r"http://127\.0\.0\.1:\d+/t\d+", "max_targets": 3}}, BASE)
    client = await _client(cfg)
    try:
        for i in range(5):
            assert (await client.get("/probe", params={"target": f"{url}/t{i}"})).status == 200
        await client.get("/probe", params={"target": f"{url}/t2"})  # most recently used now
        assert (await client.get("/probe", params={"target": f"{url}/t5"})).status == 200
        exp = client.server.app[EXPORTER]
        assert sorted(exp.probed) == [f"{url}/t2", f"{url}/t4", f"{url}/t5"]
        exp.render()
        await asyncio.sleep(1.0)  # the exposition re-merges at most once a second at this interval
        text = (await (await client.get("/metrics")).read()).decode()
        assert 'kvoffload_exporter_probe_evictions_total{reason="capacity"} 3.0' in text
    finally:
        await client.close()


@pytest.mark.parametrize(
    "params,status",
    [
        ({"name": "x" * 2000}, 400),
        ({"name": "a\r\nb"}, 400),
        ({"name": "\x1b[31mred"}, 400),
        ({"name": "x" * 1024}, 200),
    ],
)
async def test_names_obey_the_label_cap(upstream: tuple[Upstream, str], params: dict[str, str], status: int) -> None:
    _, url = upstream
    client = await _client(from_mapping({"probe": {"allow": [url]}}, BASE))
    try:
        r = await client.get("/probe", params={"target": url, **params})
        assert r.status == status
        assert len(client.server.app[EXPORTER].probed) == (status == 200)
    finally:
        await client.close()


async def test_long_urls_and_query_strings_are_refused(upstream: tuple[Upstream, str]) -> None:
    _, url = upstream
    client = await _client(from_mapping({"probe": {"allow_regex": r"http://127\.0\.0\.1:\d+.*"}}, BASE))
    try:
        assert (await client.get("/probe", params={"target": url + "/" + "a" * 3000})).status == 400
        assert (await client.get("/probe", params={"target": url + "/?x=1"})).status == 403
        assert not client.server.app[EXPORTER].probed
    finally:
        await client.close()


async def test_probes_of_slow_targets_leave_configured_targets_their_slots(upstream: tuple[Upstream, str]) -> None:
    up, url = upstream
    cfg = from_mapping(
        {
            "probe": {"allow_regex": r"http://127\.0\.0\.1:\d+/slow/\d+", "max_concurrent_polls": 2},
            "max_concurrent_polls": 2,
            "poll_interval": 0.5,
            "timeout": 5,
            "window": 10,
        },
        replace(BASE, targets=(TargetConfig(url=url, name="conf"),)),
    )
    client = await _client(cfg)
    try:
        probes = [asyncio.ensure_future(client.get("/probe", params={"target": f"{url}/slow/{i}"})) for i in range(20)]
        exp = client.server.app[EXPORTER]
        for _ in range(100):  # bounded: until both probe slots hold a blocked poll
            if up.requests >= 3:
                break
            await asyncio.sleep(0.02)
        start = exp.targets[0].polls
        for _ in range(500):  # bounded wait; with shared slots the configured target would never poll
            if exp.targets[0].polls >= start + 3:
                break
            await asyncio.sleep(0.02)
        assert exp.targets[0].polls >= start + 3
        assert sum(1 for p in exp.probed.values() if p.polls == 0) >= 18  # the rest wait for a probe slot
        up.release.set()
        for r in await asyncio.gather(*probes):
            assert r.status == 200
    finally:
        await client.close()


def test_allow_regex_with_backtracking_constructs_is_refused() -> None:
    for pattern, word in ((r"http://(a)\1", "backreferences"), (r"http://(?=x).*", "lookahead")):
        with pytest.raises(ConfigError, match=word):
            from_mapping({"probe": {"allow_regex": pattern}})


async def test_a_catastrophic_regex_is_matched_in_linear_time() -> None:
    client = await _client(from_mapping({"probe": {"allow_regex": r"http://(a|aa)+(a+)+\.x"}}, BASE))
    try:  # Python's re needs ~2^40 steps for this URL; the Pike VM a few hundred thousand
        r = await client.get("/probe", params={"target": "http://" + "a" * 1500 + "!"})
        assert r.status == 403
        assert (await client.get("/healthz")).status == 200
    finally:
        await client.close()


async def test_a_reload_rebuilds_the_allow_list_and_drops_what_it_no_longer_allows(
    upstream: tuple[Upstream, str],
) -> None:
    """Configured A is replaced by B and the probe allow-list loses /p: B is probed at once, A and /p are
    refused, and the probed /p's poller is dropped (counted, reason reload)."""
    _, url = upstream
    a, b, p = f"{url}/a", f"{url}/b", f"{url}/p"
    cfg = from_mapping({"probe": {"allow": [p]}}, replace(BASE, targets=(TargetConfig(url=a),)))
    client = await _client(cfg)
    exp = client.server.app[EXPORTER]
    try:
        for target in (a, p):
            assert (await client.get("/probe", params={"target": target})).status == 200
        assert (await client.get("/probe", params={"target": b})).status == 403
        exp.reload(replace(BASE, targets=(TargetConfig(url=b),)))
        r = await client.get("/probe", params={"target": b})
        assert r.status == 200
        assert 'kvoffload_up{target="127.0.0.1' in (body := await r.text()) and "} 1.0" in body
        assert (await client.get("/probe", params={"target": a})).status == 403
        assert (await client.get("/probe", params={"target": p})).status == 403
        assert exp.probed == {}
        assert client.server.app[GUARDS].evicted == {ProbeEviction.RELOAD: 1}
    finally:
        await client.close()


async def test_a_configured_target_whose_polls_stopped_is_served_as_stale_not_up(
    upstream: tuple[Upstream, str],
) -> None:
    """Kept state older than the staleness bound (here max(3 × 0.05 s, 0.05 s + 0.05 s)) is `up 0`,
    reason `stale`, on /probe and /metrics alike; never `up 1` with frozen data."""
    _, url = upstream
    cfg = replace(BASE, poll_interval=0.05, timeout=0.05, window=1.0, targets=(TargetConfig(url=url, name="a"),))
    client = await _client(cfg)
    exp = client.server.app[EXPORTER]
    try:
        assert 'kvoffload_up{target="a"} 1.0' in await (await client.get("/probe", params={"target": url})).text()
        (task,) = exp.scheduler.loops.values()
        task.cancel()  # the target's loop stops polling (as a saturated or lost loop would)
        body = ""
        for _ in range(300):
            body = await (await client.get("/probe", params={"target": url})).text()
            if 'kvoffload_up{target="a"} 0.0' in body:
                break
            await asyncio.sleep(0.01)
        assert 'kvoffload_up{target="a"} 0.0' in body
        assert 'kvoffload_scrape_errors_total{target="a",reason="stale"} 1.0' in body
        assert "kvoffload_state{" not in body  # no engine series from data that old
        metrics = await (await client.get("/metrics")).text()
        assert 'kvoffload_up{target="a"} 1.0' not in metrics
    finally:
        await client.close()

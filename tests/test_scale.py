"""Scale and protocol: fragment merge, content negotiation, promtool on both formats, /probe, readiness."""

from __future__ import annotations

import asyncio
import gzip
import shutil
import subprocess

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer
from conftest import fixture_text
from support.chain import ChainServer, ManualClock
from support.net import free_port
from support.prom import families

from kvoffload_exporter.config.settings import Config, ConfigError, TargetConfig, from_mapping
from kvoffload_exporter.expose.render import CATALOGUE, Exposition, accepts_gzip, merge, wants_openmetrics
from kvoffload_exporter.server.app import EXPORTER, make_app
from kvoffload_exporter.server.exporter import Exporter

CAPTURES = [fixture_text("h200-0.6b/A_00_initial.prom"), fixture_text("h200-0.6b/A_12_final.prom")]
PROMTOOL = shutil.which("promtool")


def _frag(target: str, up: float) -> dict[str, str]:
    x = Exposition({})
    x.add("kvoffload_up", up, {"target": target})
    x.add("kvoffload_scrape_body_bytes", 10.0, {"target": target})
    return x.fragment()


def _headers(body: str) -> list[str]:
    return [line for line in body.splitlines() if line.startswith("# TYPE")]


# --- fragment merge ---------------------------------------------------------------------------------


def test_merge_writes_each_header_once_in_catalogue_order_and_fragments_in_given_order() -> None:
    body = merge([_frag("b", 1.0), _frag("a", 0.0)])
    assert _headers(body) == ["# TYPE kvoffload_up gauge", "# TYPE kvoffload_scrape_body_bytes gauge"]
    lines = [line for line in body.splitlines() if not line.startswith("#")]
    assert lines[:2] == ['kvoffload_up{target="b"} 1.0', 'kvoffload_up{target="a"} 0.0']
    assert merge([_frag("b", 1.0), _frag("a", 0.0)]) == body  # stable
    order = list(CATALOGUE)
    assert order.index("kvoffload_up") < order.index("kvoffload_scrape_body_bytes")


def test_merge_without_a_fragment_drops_its_series_and_empty_families() -> None:
    body = merge([_frag("b", 1.0)])
    assert 'target="a"' not in body
    assert merge([]) == ""
    assert merge([_frag("a", 1.0)], openmetrics=True).endswith("# EOF\n")


def test_merged_body_equals_the_single_pass_rendering() -> None:
    x = Exposition({})
    for t in ("a", "b"):
        x.add("kvoffload_up", 1.0, {"target": t})
    assert x.text() == merge([_frag("a", 1.0), _frag("b", 1.0)]).replace(
        "# HELP kvoffload_scrape_body_bytes Size of the last /metrics body read from the target.\n"
        '# TYPE kvoffload_scrape_body_bytes gauge\nkvoffload_scrape_body_bytes{target="a"} 10.0\n'
        'kvoffload_scrape_body_bytes{target="b"} 10.0\n',
        "",
    )


async def test_a_target_not_polled_yet_is_not_reported_down() -> None:
    """Between start (or a restart) and a target's first poll nothing is exported for it: `up 0` would say
    the exporter failed to read it, and KVOffloadExporterTargetDown would go pending on every restart."""
    import aiohttp

    clock = ManualClock()
    config = Config(targets=(TargetConfig(url=f"http://127.0.0.1:{free_port()}", name="gone"),), host_enabled=False,
                    gpu_enabled=False)  # fmt: skip
    exp = Exporter(config, clock=clock, timer=clock, runtime_metrics=False)
    before = exp.body.decode()
    assert 'target="gone"' not in before
    assert 'kvoffload_exporter_collector_success{collector="vllm"} 1.0' in before
    async with aiohttp.ClientSession() as s:
        clock.t += 5
        await exp.scheduler.poll(exp.targets[0], s)  # a closed port: the first poll fails
    after = exp.body.decode()
    assert 'kvoffload_up{target="gone"} 0.0' in after
    assert 'kvoffload_scrape_errors_total{target="gone",reason="connect"} 1.0' in after
    assert 'kvoffload_exporter_collector_success{collector="vllm"} 0.0' in after


async def test_a_poll_rebuilds_only_its_own_fragment() -> None:
    clock = ManualClock()
    async with ChainServer(CAPTURES, "0.26.0") as url_a, ChainServer(CAPTURES, "0.26.0") as url_b:
        config = Config(
            targets=(TargetConfig(url=url_a, name="a"), TargetConfig(url=url_b, name="b")),
            host_enabled=False,
            gpu_enabled=False,
        )
        exp = Exporter(config, clock=clock, timer=clock, runtime_metrics=False)
        import aiohttp

        async with aiohttp.ClientSession() as s:
            before_a, before_b = exp.targets[0].fragment, exp.targets[1].fragment
            first = exp.body
            clock.t += 5
            await exp.scheduler.poll(exp.targets[0], s)
    assert exp.targets[1].fragment is before_b
    assert exp.targets[0].fragment is not before_a
    assert exp.body != first
    body = exp.body.decode()
    assert 'kvoffload_up{target="a"} 1.0' in body
    assert 'target="b"' not in body  # never polled: nothing says it is down
    assert body.count("# TYPE kvoffload_up ") == 1
    assert exp.body is exp.body  # cached per generation


# --- negotiation ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "accept,om",
    [
        ("", False),
        ("*/*", False),
        ("text/plain; version=0.0.4", False),
        ("application/openmetrics-text; version=1.0.0; charset=utf-8", True),
        ("application/openmetrics-text;version=1.0.0;q=0.5,text/plain;version=0.0.4;q=0.3,*/*;q=0.2", True),
        ("application/openmetrics-text;version=1.0.0;q=0.2,text/plain;version=0.0.4;q=0.9", False),
        ("application/openmetrics-text;version=2.0.0", False),
        ("application/openmetrics-text;q=0", False),
    ],
)
def test_openmetrics_is_chosen_only_when_preferred(accept: str, om: bool) -> None:
    assert wants_openmetrics(accept) is om


@pytest.mark.parametrize(
    "value,ok", [("gzip", True), ("gzip, deflate, br", True), ("identity", False), ("gzip;q=0", False), ("", False)]
)
def test_gzip_is_used_only_when_accepted(value: str, ok: bool) -> None:
    assert accepts_gzip(value) is ok


async def _client(config: Config, exporter: Exporter | None = None) -> TestClient:
    client = TestClient(TestServer(make_app(config, exporter=exporter)))
    await client.start_server()
    return client


async def _wait_ready(client: TestClient) -> None:
    for _ in range(500):
        if (await client.get("/-/ready")).status == 200:
            return
        await asyncio.sleep(0.02)
    raise AssertionError("never ready")


async def test_metrics_negotiates_gzip_openmetrics_and_falls_back_to_text() -> None:
    async with ChainServer(CAPTURES, "0.26.0") as url:
        cfg = Config(
            targets=(TargetConfig(url=url, name="a"),), poll_interval=0.05, gpu_enabled=False, host_enabled=False
        )
        client = await _client(cfg)
        try:
            exp = client.server.app[EXPORTER]
            while exp.targets[0].polls < 2:  # the second capture brings TTFT samples into the window
                await asyncio.sleep(0.02)
            plain = await client.get("/metrics", headers={"Accept-Encoding": "identity"})
            assert plain.headers["Content-Type"] == "text/plain; version=0.0.4; charset=utf-8"
            assert "Content-Encoding" not in plain.headers
            text = await plain.read()
            assert b"process_cpu_seconds_total" in text and b"python_info" in text
            gz = await client.get("/metrics", headers={"Accept-Encoding": "gzip"}, auto_decompress=False)
            assert gz.headers["Content-Encoding"] == "gzip"
            raw = await gz.read()
            assert gzip.decompress(raw).startswith(b"# HELP kvoffload_up")
            om = await client.get("/metrics", headers={"Accept": "application/openmetrics-text; version=1.0.0"})
            assert om.headers["Content-Type"] == "application/openmetrics-text; version=1.0.0; charset=utf-8"
            om_text = await om.text()
            assert om_text.endswith("# EOF\n")
            names = {f.name: f.type for f in families(om_text, openmetrics=True)}
            assert names["kvoffload_scrape_errors"] == "counter"
            assert names["kvoffload_target"] == "info"
            assert names["kvoffload_ttft_seconds"] == "summary"
        finally:
            await client.close()


# --- promtool on both formats -----------------------------------------------------------------------


def _promtool(body: bytes) -> subprocess.CompletedProcess[bytes]:
    assert PROMTOOL is not None
    return subprocess.run([PROMTOOL, "check", "metrics"], input=body, capture_output=True, timeout=60)


def _promtool_reads_openmetrics() -> bool:
    probe = b'# TYPE x info\nx_info{a="b"} 1\n# EOF\n'
    return PROMTOOL is not None and b"unknown metric type" not in _promtool(probe).stdout + _promtool(probe).stderr


@pytest.mark.skipif(PROMTOOL is None, reason="promtool not installed (apt-get install prometheus)")
@pytest.mark.parametrize("openmetrics", [False, True])
async def test_promtool_accepts_the_exposition(openmetrics: bool) -> None:
    from support.chain import run_chain

    exp = await run_chain(CAPTURES, "0.26.0")
    body = exp.exposition(openmetrics)
    if openmetrics and not _promtool_reads_openmetrics():
        # This promtool parses text 0.0.4 only: hold the body to the reference OpenMetrics parser.
        assert {f.name for f in families(body.decode(), openmetrics=True)}
        pytest.skip("this promtool cannot parse OpenMetrics (info type); checked with the reference parser")
    res = _promtool(body)
    assert res.returncode == 0, res.stdout.decode() + res.stderr.decode()


# --- /probe -----------------------------------------------------------------------------------------


async def test_probe_refuses_targets_outside_the_allow_list() -> None:
    cfg = from_mapping(
        {
            "targets": ["http://127.0.0.1:9"],
            "probe": {"allow": ["http://10.0.0.1:8000"], "allow_regex": r"http://vllm-\d+:8000"},
        },
        Config(gpu_enabled=False, host_enabled=False),
    )
    client = await _client(cfg)
    try:
        for url in (
            "http://169.254.169.254/latest",
            "http://vllm-1:8000.evil.example",
            "file:///etc/passwd",
            "http://user:secret@vllm-1:8000",
        ):
            resp = await client.get("/probe", params={"target": url})
            assert resp.status == 403, url
        assert (await client.get("/probe")).status == 400
        probes = client.server.app[EXPORTER]
        from kvoffload_exporter.server.app import PROBES

        allowed = client.server.app[PROBES].allowed
        assert allowed("http://10.0.0.1:8000") and allowed("http://vllm-7:8000") and allowed("http://127.0.0.1:9")
        assert not probes.probed
    finally:
        await client.close()


async def test_probe_answers_with_that_target_only_keeps_history_and_evicts_when_idle() -> None:
    timer = ManualClock(1000.0)
    async with ChainServer(CAPTURES, "0.26.0") as url:
        cfg = from_mapping(
            {"probe": {"allow": [url], "idle_ttl": "10m"}, "poll_interval": 5},
            Config(gpu_enabled=False, host_enabled=False),
        )
        exp = Exporter(cfg, timer=timer, runtime_metrics=False)
        client = await _client(cfg, exp)
        try:
            first = await client.get("/probe", params={"target": url, "name": "pod-1"})
            assert first.status == 200
            text = await first.text()
            assert 'kvoffload_up{target="pod-1"} 1.0' in text
            assert "kvoffload_exporter_build_info" not in text  # that target's series only
            poller = exp.probed[url]
            timer.t += 5
            await client.get("/probe", params={"target": url, "name": "pod-1"})
            assert len(poller.history) == 2  # history kept between probes
            timer.t += 1  # within half an interval: served from state, not polled again
            await client.get("/probe", params={"target": url, "name": "pod-1"})
            assert poller.polls == 2
            assert 'kvoffload_targets{kind="probed"} 1.0' in exp.body.decode()
            timer.t += 601
            from kvoffload_exporter.server.app import PROBES

            assert client.server.app[PROBES].evict() == 1
            assert not exp.probed
            assert 'kvoffload_targets{kind="probed"} 0.0' in exp.body.decode()
        finally:
            await client.close()


def test_probe_settings_are_validated() -> None:
    with pytest.raises(ConfigError) as e:
        from_mapping({"probe": {"allow": ["nope"], "allow_regex": "(", "idle_ttl": 0, "x": 1}})
    assert "probe" in str(e.value)
    with pytest.raises(ConfigError) as e:
        from_mapping({"probe": {"allow": ["nope"], "allow_regex": "(", "idle_ttl": 0}, "max_concurrent_polls": 0})
    text = str(e.value)
    assert "probe.allow[0]" in text and "allow_regex" in text and "idle_ttl" in text and "max_concurrent_polls" in text


# --- readiness --------------------------------------------------------------------------------------


async def test_ready_only_after_the_first_poll_round() -> None:
    gate = asyncio.Event()

    async def metrics(request: web.Request) -> web.Response:
        await gate.wait()
        return web.Response(text=CAPTURES[0], content_type="text/plain")

    async def version(request: web.Request) -> web.Response:
        return web.json_response({"version": "0.26.0"})

    app = web.Application()
    app.router.add_get("/metrics", metrics)
    app.router.add_get("/version", version)
    upstream = TestServer(app)
    await upstream.start_server()
    cfg = Config(
        targets=(TargetConfig(url=f"http://127.0.0.1:{upstream.port}", name="a"),),
        poll_interval=0.05,
        timeout=5.0,
        gpu_enabled=False,
        host_enabled=False,
    )
    client = await _client(cfg)
    try:
        assert (await client.get("/-/healthy")).status == 200
        await asyncio.sleep(0.2)
        assert (await client.get("/-/ready")).status == 503
        gate.set()
        await _wait_ready(client)
        assert (await client.get("/-/ready")).status == 200
    finally:
        gate.set()
        await client.close()
        await upstream.close()


async def test_telemetry_path_is_configurable() -> None:
    cfg = Config(telemetry_path="/custom", gpu_enabled=False, host_enabled=False)
    client = await _client(cfg)
    try:
        assert (await client.get("/custom")).status == 200
        assert (await client.get("/metrics")).status == 404
    finally:
        await client.close()


def test_a_probe_only_replica_needs_no_targets(tmp_path) -> None:
    import sys

    cfg = tmp_path / "probe.yaml"
    cfg.write_text("probe:\n  allow_regex: 'http://10\\.[0-9.]+:8000'\n", encoding="utf-8")
    res = subprocess.run(
        [sys.executable, "-m", "kvoffload_exporter", "serve", "--config.file", str(cfg), "--config.check"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert res.returncode == 0, res.stderr
    empty = tmp_path / "empty.yaml"
    empty.write_text("poll_interval: 5\n", encoding="utf-8")
    res = subprocess.run(
        [sys.executable, "-m", "kvoffload_exporter", "serve", "--config.file", str(empty), "--config.check"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert res.returncode == 2 and "at least one --target" in res.stderr


async def test_a_gzip_scrape_does_not_queue_behind_another_scrapes_compression() -> None:
    """While one scrape compresses a newer generation, another gets the last compressed body at once if
    that generation was published under two merge intervals ago, and waits for the new one if not."""
    clock = ManualClock()
    exp = Exporter(Config(host_enabled=False, gpu_enabled=False), clock=clock, timer=clock, runtime_metrics=False)
    first = await exp.gzip_exposition()
    exp.render()
    clock.t += exp.cache.min_merge  # a new generation is due
    async with exp.cache.gzip_lock:  # ... and another scrape is compressing it
        assert await asyncio.wait_for(exp.gzip_exposition(), 5) is first  # a wait here would time out
        clock.t += exp.cache.min_merge  # the last body is now two merge intervals old: a scrape waits
        waiting = asyncio.ensure_future(exp.gzip_exposition())
        await asyncio.sleep(0.01)
        assert not waiting.done()
    newer = await waiting
    assert newer is not first
    assert gzip.decompress(newer) == exp.body


def _but_merge_time(body: bytes) -> list[bytes]:
    return [line for line in body.splitlines() if b"kvoffload_exporter_render_duration_seconds" not in line]


async def test_a_gzip_scrape_keeps_only_the_compressed_body() -> None:
    """Prometheus asks for gzip: the merged body a gzip scrape compressed is not kept beside it (9.4 MB at
    1,000 targets until the next generation); an uncompressed scrape of that generation merges the same
    series again (only the last merge's duration is newer), and one that came first is compressed, not
    merged twice."""
    clock = ManualClock()
    exp = Exporter(Config(host_enabled=False, gpu_enabled=False), clock=clock, timer=clock, runtime_metrics=False)
    exp.render()
    compressed = await exp.gzip_exposition()
    kept = exp.cache._cache
    assert [k[2] for k in kept] == [True] and kept[next(iter(kept))] is compressed
    plain = exp.cache.exposition()
    assert _but_merge_time(gzip.decompress(compressed)) == _but_merge_time(plain) and plain == exp.body
    exp.render()
    clock.t += exp.cache.min_merge  # a new generation: an uncompressed scrape first, then a gzip one
    plain = exp.cache.exposition()
    assert gzip.decompress(await exp.gzip_exposition()) == plain
    assert sorted(k[2] for k in exp.cache._cache) == [False, True]

"""Hardening, fourth pass: slots fair per source address, duplicates in any label order, abandoned
/probe requests cancelled, shutdown within the grace period.

A few addresses answered once (any address is, without basic auth) must not hold every connection slot,
and a wrong-password flood from many addresses right after a reload (both caches empty) must not hold
every password-check place: Prometheus, answered before, still gets through."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import bcrypt
import pytest

from kvoffload_exporter.server.connslots import Admit, Slots
from kvoffload_exporter.server.webauth import AuthGate


def _fill(slots: Slots, peers: list[str]) -> dict[str, int]:
    """Each peer opens connections in turn (headers sent at once) until every one is refused."""
    held = dict.fromkeys(peers, 0)
    progress = True
    while progress:
        progress = False
        for p in peers:
            if slots.admit(p, trusted=True, lane_open=False) is Admit.SLOT:
                slots.headers_done(p)
                held[p] += 1
                progress = True
    return held


@pytest.mark.parametrize("attackers", [4, 24])
def test_addresses_answered_once_cannot_take_the_reserve_from_prometheus(attackers: int) -> None:
    slots = Slots(256)
    held = _fill(slots, [f"10.0.0.{i}" for i in range(attackers)])
    assert sum(held.values()) < 256, held  # the last slots stay for addresses holding the fewest
    assert slots.admit("prometheus", trusted=True, lane_open=False) is Admit.SLOT
    assert slots.admit("kubelet", trusted=True, lane_open=False) is Admit.SLOT


def test_one_address_still_gets_its_quarter_when_nobody_else_is_there() -> None:
    slots = Slots(256)
    assert _fill(slots, ["prometheus"]) == {"prometheus": 64}


async def test_a_wrong_password_flood_after_a_reload_leaves_prometheus_a_check() -> None:
    good = bcrypt.hashpw(b"right-password", bcrypt.gensalt(4))
    gate = AuthGate({"prometheus": good}, max_pending=8)
    release = threading.Event()
    checked = gate._check

    def slow(*a: object) -> bool:
        release.wait(30)  # the flood's checks hold the bcrypt thread until the test lets them go
        return checked(*a)  # type: ignore[arg-type]

    try:
        assert await gate.verify("prometheus-addr", "prometheus", "right-password") is True
        gate.replace({"prometheus": good})  # SIGHUP: both caches forgotten
        gate._check = slow  # type: ignore[method-assign]
        flood = [asyncio.ensure_future(gate.verify(f"10.1.0.{i}", "prometheus", f"guess-{i}")) for i in range(60)]
        await asyncio.sleep(0)
        busy = sum(1 for f in flood if f.done() and f.result() is None)
        assert busy >= 60 - 8  # the flood is refused past its places (429)
        scrape = asyncio.ensure_future(gate.verify("prometheus-addr", "prometheus", "right-password"))
        await asyncio.sleep(0)
        assert not scrape.done() or scrape.result() is not None, "Prometheus got 429 (auth_busy)"
        release.set()
        assert await scrape is True
        await asyncio.gather(*flood)
    finally:
        release.set()
        gate.close()


async def test_a_web_config_password_once_proven_is_scrubbed_from_every_log_line() -> None:
    from kvoffload_exporter.redact import scrub

    gate = AuthGate({"prometheus": bcrypt.hashpw(b"web-password-44", bcrypt.gensalt(4))})
    try:
        assert await gate.verify("p", "prometheus", "web-password-44") is True
    finally:
        gate.close()
    assert scrub("said WEB-PASSWORD-44") == "said <redacted>"


# --- a duplicate series is refused whatever its label order (MEDIUM) ------------------------------------


def test_a_duplicate_series_with_its_labels_in_another_order_is_refused() -> None:
    from conftest import fixture_text

    from kvoffload_exporter.ingest.exposition import ParseError
    from kvoffload_exporter.ingest.linecache import LineCache
    from kvoffload_exporter.ingest.normalise import normalise

    good = fixture_text("h200-0.6b/A_12_final.prom")
    line = next(ln for ln in good.splitlines() if ln.startswith('vllm:kv_offload_total_bytes_total{engine="0"'))
    reordered = line.replace('engine="0",model_name="Qwen/Qwen3-0.6B"', 'model_name="Qwen/Qwen3-0.6B",engine="0"')
    assert reordered != line
    hostile = good + reordered + "\n"
    with pytest.raises(ParseError, match="duplicate series"):
        normalise(hostile)
    cache = LineCache()
    normalise(good, cache=cache)
    normalise(good, cache=cache)  # a plan of the good body
    for _ in range(3):  # read the long way or by a plan, refused every time: never summed
        with pytest.raises(ParseError, match="duplicate series"):
            normalise(hostile, cache=cache)


# --- abandoned /probe requests are cancelled (MEDIUM) ----------------------------------------------------


async def test_abandoned_probes_are_cancelled_and_never_polled() -> None:
    import aiohttp
    from aiohttp import web

    from kvoffload_exporter.config.settings import Config
    from kvoffload_exporter.server.app import PROBES, make_app
    from kvoffload_exporter.server.guards import GuardStats
    from kvoffload_exporter.server.listener import ListenLimits

    seen: list[str] = []
    release = asyncio.Event()

    async def slow(request: web.Request) -> web.Response:
        if request.path.endswith("/version"):
            return web.Response(status=404)
        seen.append(request.path)
        if request.path != "/f/metrics":
            await release.wait()
        return web.Response(text="vllm:num_requests_running 0\n")

    target = web.Application()
    target.router.add_get("/{tail:.*}", slow)
    trunner = web.AppRunner(target)
    await trunner.setup()
    tsite = web.TCPSite(trunner, "127.0.0.1", 0)
    await tsite.start()
    tport = tsite._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    urls = [f"http://127.0.0.1:{tport}/{p}" for p in "abcdef"]
    cfg = Config(gpu_enabled=False, host_enabled=False, probe_allow=tuple(urls), probe_max_concurrent_polls=1)
    guards = GuardStats()
    app = make_app(cfg, guards=guards)
    runner = web.AppRunner(app, access_log=None, handle_signals=False, **ListenLimits().runner_kwargs(guards))
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    base = f"http://127.0.0.1:{port}/probe"
    try:
        async with aiohttp.ClientSession() as s:

            async def probe(url: str) -> int:
                async with s.get(base, params={"target": url}) as r:
                    return r.status

            abandoned = [asyncio.ensure_future(probe(u)) for u in urls[:5]]
            for _ in range(500):  # the first holds the one probe slot, the other four wait for it
                if seen and len(app[PROBES]._slots._waiters or ()) == 4:
                    break
                await asyncio.sleep(0.01)
            for t in abandoned:
                t.cancel()  # Prometheus' scrape timeout: the connections close
            await asyncio.gather(*abandoned, return_exceptions=True)
            for _ in range(500):
                if not app[PROBES]._slots._waiters and not app[PROBES]._slots.locked():
                    break
                await asyncio.sleep(0.01)
            assert not app[PROBES]._slots._waiters, "abandoned probes still wait for a probe slot"
            release.set()
            assert await probe(urls[5]) == 200
        assert seen == ["/a/metrics", "/f/metrics"], seen  # b..e were never polled
    finally:
        release.set()
        await runner.cleanup()
        await trunner.cleanup()


def test_sigterm_fits_kubernetes_grace_period() -> None:
    """aiohttp waits `shutdown_timeout` for requests in flight, then as long again for their cancellation
    (measured: 4 s gives 8.0 s with 40 `/probe`s stuck on a target that never answers; aiohttp's default
    60 s gave over 90 s, and 60.9 s with the probes abandoned); Kubernetes sends SIGKILL after 30 s."""
    from kvoffload_exporter.server.guards import GuardStats
    from kvoffload_exporter.server.listener import ListenLimits

    kwargs = ListenLimits().runner_kwargs(GuardStats())
    assert kwargs["handler_cancellation"] is True
    assert 2 * kwargs["shutdown_timeout"] + 5 < 30


# --- LOW items refused with one clear line ---------------------------------------------------------------


@pytest.mark.parametrize(
    "headers",
    [{"Origin": "http://evil.example"}, {"Sec-Fetch-Site": "cross-site"}],
    ids=["origin", "sec-fetch-site"],
)
async def test_a_cross_origin_post_reload_from_a_browser_is_refused(headers: dict[str, str]) -> None:
    from aiohttp.test_utils import TestClient, TestServer

    from kvoffload_exporter.config.settings import Config
    from kvoffload_exporter.server.app import LIFECYCLE, make_app

    reloads: list[int] = []

    async def reload() -> tuple[bool, str]:
        reloads.append(1)
        return True, "targets: reloaded\n"

    app = make_app(Config(gpu_enabled=False, host_enabled=False))
    app[LIFECYCLE].reload = reload
    async with TestClient(TestServer(app)) as client:
        r = await client.post("/-/reload", headers=headers, data="x=1")
        assert r.status == 403 and "cross-origin reload refused" in await r.text()
        assert not reloads
        r = await client.post("/-/reload", data=b"")  # curl, a script: applied
        assert r.status == 200 and reloads == [1]


@pytest.mark.parametrize(
    "raw,needle",
    [
        ({"web": {"max_connections": 2}}, "web.max_connections"),
        ({"telemetry_path": "/-/reload"}, "is taken by the exporter itself"),
    ],
)
def test_settings_that_would_serve_nothing_are_refused(raw: dict[str, object], needle: str) -> None:
    from kvoffload_exporter.config.schema import ConfigError
    from kvoffload_exporter.config.settings import from_mapping

    with pytest.raises(ConfigError, match=needle):
        from_mapping({"targets": ["http://h:1"], **raw})


@pytest.mark.parametrize(
    "which,text,needle",
    [
        ("web", "basic_auth_users: " + "[" * 999 + "]" * 999 + "\n", "nested too deeply"),
        ("web", "tls_server_config:\n  min_version: " + "9" * 5000 + "\n", "line 2: a number of more than 4000 digits"),
        ("config", "targets: ['http://127.0.0.1:9']\npoll_interval: " + "9" * 5000 + "\n", "line 2: a number of more"),
        (
            "config",
            "targets: ['http://127.0.0.1:9']\n<<: {targets: ['http://127.0.0.1:10']}\n",
            "duplicate key 'targets'",
        ),
        ("config", "targets: ['http://127.0.0.1:9']\npoll_interval: 1\n<<: [{poll_interval: 2}]\n", "duplicate key"),
    ],
    ids=["web-999-deep", "web-5000-digits", "config-5000-digits", "merge-targets", "merge-poll-interval"],
)
def test_hostile_yaml_is_one_line_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], which: str, text: str, needle: str
) -> None:
    from kvoffload_exporter.cli import main

    f = tmp_path / "f.yml"
    f.write_text(text)
    argv = ["serve", "--config.check"]
    argv += (
        ["--target", "http://127.0.0.1:9", "--web.config.file", str(f)] if which == "web" else ["--config.file", str(f)]
    )
    assert main(argv) == 2
    err = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
    assert len(err) == 1 and needle in err[0] and "Traceback" not in err[0], err


@pytest.mark.parametrize("url", ["http://h:8000/v1", "http://h:8000/v1/", "http://h:8000/v1/metrics"])
def test_serve_strips_the_openai_v1_from_a_target_url(url: str) -> None:
    from kvoffload_exporter.config.settings import from_mapping

    (t,) = from_mapping({"targets": [url]}).targets
    assert t.url == "http://h:8000"


def test_check_never_prints_a_query_token_in_its_v1_notice(capsys: pytest.CaptureFixture[str]) -> None:
    from kvoffload_exporter.cli import main

    main(["check", "--target", "http://127.0.0.1:9/v1?token=qs-secret-44", "--model", "m", "--rounds", "1"])
    err = capsys.readouterr().err
    assert "ends in /v1" in err and "qs-secret-44" not in err


async def test_a_wall_clock_set_forward_a_day_never_makes_a_window_of_a_day() -> None:
    import aiohttp
    from test_runtime_edges import Clock, Target

    from kvoffload_exporter.config.settings import Config, TargetConfig
    from kvoffload_exporter.server.targetpoller import TargetPoller

    target = Target()
    url = await target.start()
    wall, mono = Clock(1_800_000_000.0), Clock(100.0)
    cfg = Config(gpu_enabled=False, host_enabled=False, poll_interval=5.0, window=60.0)
    poller = TargetPoller(TargetConfig(url=url, name="t"), cfg, clock=wall, timer=mono)
    windows: list[float] = []
    try:
        async with aiohttp.ClientSession() as session:
            for i in range(20):
                wall.t += 86_400.0 if i == 10 else 5.0
                mono.t += 5.0
                await poller.poll_once(session)
                windows += [d.window_seconds for d in poller.view.derived.values()]
    finally:
        await target.close()
    assert windows and max(windows) <= 60.0, max(windows)
    assert poller.view.last_success == wall.t  # Prometheus still compares the wall clock


async def test_a_json_that_does_not_fit_still_leaves_the_bundle(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import errno

    from test_check_run import _run as failed_run  # a result without a run: the bundle's table, quickly

    from kvoffload_exporter.canary.check import checkreport, evidence

    def too_large(*a: object) -> None:
        raise OSError(errno.EFBIG, "File too large")  # `ulimit -f`

    monkeypatch.setattr(evidence, "_write_json", too_large)
    result = await failed_run()
    ev = evidence.Evidence(result, checkreport.document(result), "t\n", {})
    with pytest.raises(OSError, match="File too large"):
        evidence.write(ev, str(tmp_path / "check.json"), str(tmp_path / "evidence"))
    assert (tmp_path / "evidence" / "report.json").is_file()  # the bundle was written all the same

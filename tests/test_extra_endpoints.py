"""`serve` reads a target's second metrics endpoint (KVBM, LMCache MP server) as `inspect a+b` does.

Why: those backends publish their store/load counters beside vLLM's /metrics, on their own port; with
one URL per target `serve` saw only vLLM's half and reported them `not_configured`. An extra endpoint
that fails must cost its evidence, counted and logged once, never the target's `up`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer
from support.chain import STEP, ChainServer, ManualClock

from kvoffload_exporter.config.settings import Config, ConfigError, TargetConfig, from_mapping
from kvoffload_exporter.server.exporter import Exporter

RECON = Path(__file__).resolve().parent / "fixtures" / "reconstructed"
# (fixture, extra endpoint's file prefix, backend, loaded series read from the extra body: name, labels, value)
PAIRS = [
    ("kvbm-1.6.1", "kvbm-", "kvbm", ("kvbm_onboard_blocks_h2d", "blocks", 'tier="host"', "8160.0")),
    (
        "lmcache-mp-0.33",
        "lmcache-server-",
        "lmcache_mp",
        ("lmcache_mp_l1_read_chunks_total", "chunks", 'tier=""', "512.0"),
    ),
]


def _texts(d: str, prefix: str) -> list[str]:
    return [(RECON / d / f"{prefix}{state}.prom").read_text(encoding="utf-8") for state in ("before", "after-hit")]


async def _poll(target: TargetConfig, polls: int = 2) -> Exporter:
    """Poll `target` `polls` times on a manual clock (5 s apart); returns the exporter."""
    clock = ManualClock()
    config = Config(targets=(target,), host_enabled=False, gpu_enabled=False, window=300.0)
    exp = Exporter(config, clock=clock, timer=clock, runtime_metrics=False)
    async with aiohttp.ClientSession() as session:
        for _ in range(polls):
            await exp.scheduler.poll(exp.targets[0], session)
            clock.t += STEP
    return exp


@pytest.mark.parametrize("d,prefix,backend,loaded", PAIRS)
async def test_serve_joins_the_backend_endpoint_and_sees_the_hit(
    d: str, prefix: str, backend: str, loaded: tuple[str, str, str, str]
) -> None:
    async with ChainServer(_texts(d, ""), "0.33.0") as vllm, ChainServer(_texts(d, prefix), "") as extra:
        exp = await _poll(TargetConfig(url=vllm, name="t", extra_metrics_urls=(extra + "/metrics",)))
    body = exp.body.decode()
    lb = 'target="t",model_name="Qwen/Qwen3-0.6B",engine="0"'
    assert 'kvoffload_up{target="t"} 1.0' in body
    assert f'kvoffload_backend_info{{target="t",backend="{backend}"}} 1.0' in body
    assert f'kvoffload_state{{{lb},state="hit"}} 1.0' in body
    name, unit, labels, value = loaded  # the evidence series come from the extra body
    assert f'kvoffload_source_metric_info{{target="t",signal="loaded",resolved_name="{name}",' in body
    assert f'kvoffload_backend_loaded_{unit}_total{{{lb},{labels},connector=""}} {value}' in body
    assert 'kvoffload_extra_endpoint_errors_total{target="t",reason="connect"} 0.0' in body


async def test_without_the_extra_endpoint_the_backend_is_not_seen() -> None:
    """The control: vLLM's half alone does not resolve KVBM (what `serve` reported before)."""
    async with ChainServer(_texts("kvbm-1.6.1", ""), "0.33.0") as vllm:
        exp = await _poll(TargetConfig(url=vllm, name="t"))
    body = exp.body.decode()
    lb = 'target="t",model_name="Qwen/Qwen3-0.6B",engine="0"'
    assert f'kvoffload_state{{{lb},state="not_configured"}} 1.0' in body
    assert 'kvoffload_backend_info{target="t",backend="kvbm"}' not in body
    assert "kvoffload_extra_endpoint_errors_total" not in body  # no series for targets without extras


async def test_extra_endpoint_down_keeps_the_target_up_counts_and_logs_once_redacted(
    free_port: Callable[[], int], caplog: pytest.LogCaptureFixture
) -> None:
    dead = f"http://scraper:s3cret-pw@127.0.0.1:{free_port()}/metrics"
    target = from_mapping({"targets": [{"url": "http://127.0.0.1:1", "name": "t", "extra_metrics_urls": [dead]}]})
    async with ChainServer(_texts("kvbm-1.6.1", ""), "0.33.0") as vllm:
        with caplog.at_level(logging.WARNING, logger="kvoffload.poller"):
            exp = await _poll(replace(target.targets[0], url=vllm), polls=3)
    body = exp.body.decode()
    assert 'kvoffload_up{target="t"} 1.0' in body
    assert 'kvoffload_extra_endpoint_errors_total{target="t",reason="connect"} 3.0' in body
    assert 'kvoffload_scrape_errors_total{target="t",reason="connect"} 0.0' in body
    assert 'kvoffload_state{target="t",model_name="Qwen/Qwen3-0.6B",engine="0",state="not_configured"} 1.0' in body
    extra_logs = [r.getMessage() for r in caplog.records if "extra endpoint" in r.getMessage()]
    assert len(extra_logs) == 1, extra_logs  # once per failure kind, not every poll
    assert "s3cret" not in caplog.text and "scraper" not in caplog.text


class _AuthRecorder:
    """A /metrics that records the Authorization header each request carried."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.seen: list[str | None] = []

    async def _metrics(self, request: web.Request) -> web.Response:
        self.seen.append(request.headers.get("Authorization"))
        return web.Response(text=self.text, content_type="text/plain")

    async def __aenter__(self) -> str:
        app = web.Application()
        app.router.add_get("/metrics", self._metrics)
        self.server = TestServer(app)
        await self.server.start_server()
        return f"127.0.0.1:{self.server.port}"

    async def __aexit__(self, *exc: object) -> None:
        await self.server.close()


async def test_target_credentials_stay_with_its_origin_and_extra_userinfo_goes_to_its_url() -> None:
    vllm_text, kvbm_text = _texts("kvbm-1.6.1", "")[0], _texts("kvbm-1.6.1", "kvbm-")[0]
    recorders = {"target": _AuthRecorder(vllm_text), "other origin": _AuthRecorder("# empty\n")}
    recorders["own userinfo"] = _AuthRecorder(kvbm_text)
    r = recorders
    async with r["target"] as v, r["other origin"] as plain, r["own userinfo"] as own:
        cfg = from_mapping(
            {
                "targets": [
                    {
                        "url": f"http://u:p-0f-target@{v}",
                        "name": "t",
                        "extra_metrics_urls": [f"http://{plain}/metrics", f"http://k:v-0f-extra@{own}/metrics"],
                    }
                ]
            }
        ).targets[0]
        assert (
            "p@" not in repr(cfg) and "k:v-0f" not in repr(cfg) and cfg.extra_metrics_urls[1].startswith("http://127")
        )
        await _poll(cfg, polls=1)
    seen = {k: r.seen for k, r in recorders.items()}
    assert seen == {
        "target": ["Basic dTpwLTBmLXRhcmdldA=="],
        "other origin": [None],
        "own userinfo": ["Basic azp2LTBmLWV4dHJh"],
    }


@pytest.mark.parametrize(
    "urls,message",
    [
        ("http://x:1/metrics", "must be a list of URLs"),
        (["ftp://x:1/metrics"], "extra_metrics_urls[0] must be http(s)://HOST:PORT"),
        (["http://x:1"], "extra_metrics_urls[0] must name the endpoint's path"),
        (["http://x:1/metrics?a=1"], "without ?query or #fragment"),
    ],
)
def test_bad_extra_urls_are_one_clear_error(urls: object, message: str) -> None:
    with pytest.raises(ConfigError) as e:
        from_mapping({"targets": [{"url": "http://127.0.0.1:8000", "extra_metrics_urls": urls}]})
    assert message in str(e.value)


def test_extra_urls_are_used_as_given() -> None:
    """Full URLs: no /metrics is appended or stripped (unlike the target's base URL)."""
    cfg = from_mapping(
        {"targets": [{"url": "http://127.0.0.1:8000/metrics", "extra_metrics_urls": ["http://127.0.0.1:6880/metrics"]}]}
    )
    assert cfg.targets[0].url == "http://127.0.0.1:8000"
    assert cfg.targets[0].extra_metrics_urls == ("http://127.0.0.1:6880/metrics",)


async def test_vllm_down_is_the_target_down_whatever_the_extra_endpoint_says(free_port: Callable[[], int]) -> None:
    """The extra body alone is never a target: no vLLM data, `up 0` with vLLM's reason, extras not counted."""
    async with ChainServer(_texts("kvbm-1.6.1", "kvbm-"), "") as extra:
        target = TargetConfig(url=f"http://127.0.0.1:{free_port()}", name="t", extra_metrics_urls=(extra + "/metrics",))
        exp = await _poll(target, polls=1)
    body = exp.body.decode()
    assert 'kvoffload_up{target="t"} 0.0' in body
    assert 'kvoffload_scrape_errors_total{target="t",reason="connect"} 1.0' in body
    assert 'kvoffload_extra_endpoint_errors_total{target="t",reason="connect"} 0.0' in body


async def test_an_extra_body_that_breaks_the_join_costs_only_its_own_data() -> None:
    """vLLM's /metrics listed again as an extra endpoint: the join has duplicate series (a parse error);
    the target stays up on vLLM's body alone and the extra endpoints' `parse` error is counted."""
    async with ChainServer(_texts("kvbm-1.6.1", ""), "0.33.0") as vllm:
        exp = await _poll(TargetConfig(url=vllm, name="t", extra_metrics_urls=(vllm + "/metrics",)))
    body = exp.body.decode()
    assert 'kvoffload_up{target="t"} 1.0' in body
    assert 'kvoffload_extra_endpoint_errors_total{target="t",reason="parse"} 2.0' in body
    assert 'kvoffload_scrape_errors_total{target="t",reason="parse"} 0.0' in body


async def test_an_extra_endpoint_that_stops_answering_leaves_the_state_unknown_never_not_storing() -> None:
    """The LMCache MP server answers the first poll and is gone for the second: its series are missing, so
    the engine's state is unknown for that interval (every kvoffload_state 0, no reason), while vLLM's
    own body keeps the target up."""
    vllm_texts = _texts("lmcache-mp-0.33", "")
    clock = ManualClock()
    async with ChainServer(vllm_texts, "0.33.0") as vllm:
        extra_server = ChainServer(_texts("lmcache-mp-0.33", "lmcache-server-")[:1], "")
        extra = await extra_server.__aenter__()
        target = TargetConfig(url=vllm, name="t", extra_metrics_urls=(extra + "/metrics",))
        config = Config(targets=(target,), host_enabled=False, gpu_enabled=False, window=300.0)
        exp = Exporter(config, clock=clock, timer=clock, runtime_metrics=False)
        async with aiohttp.ClientSession() as session:
            await exp.scheduler.poll(exp.targets[0], session)
            clock.t += STEP
            await extra_server.__aexit__(None, None, None)  # the extra endpoint goes away
            await exp.scheduler.poll(exp.targets[0], session)
    body = exp.body.decode()
    lb = 'target="t",model_name="Qwen/Qwen3-0.6B",engine="0"'
    assert 'kvoffload_up{target="t"} 1.0' in body
    assert f'kvoffload_state{{{lb},state="not_storing"}} 0.0' in body
    assert not any(
        f'kvoffload_state{{{lb},state="{s}"}} 1.0' in body for s in ("not_storing", "storing", "hit", "idle")
    )
    assert 'kvoffload_extra_endpoint_errors_total{target="t",reason="connect"} 1.0' in body

"""Caps are configurable globally and per target, reach the poller, and URLs are redacted for output."""

from __future__ import annotations

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer
from conftest import fixture_text
from support.polls import metrics_after_polls

from kvoffload_exporter.config.limits import Limits
from kvoffload_exporter.config.settings import Config, ConfigError, TargetConfig, from_mapping
from kvoffload_exporter.server.app import make_app


def test_limits_global_and_per_target_from_the_config_file() -> None:
    from kvoffload_exporter.config.limits import Limits

    cfg = from_mapping(
        {
            "limits": {"sample_limit": 500, "engine_limit": 4},
            "targets": ["http://a:1", {"url": "http://b:2", "limits": {"label_value_length_limit": 64}}],
        }
    )
    assert cfg.limits == Limits(sample_limit=500, label_value_length_limit=1024, engine_limit=4)
    assert cfg.targets[0].limits is None  # the global ones apply
    assert cfg.targets[1].limits == Limits(sample_limit=500, label_value_length_limit=64, engine_limit=4)


@pytest.mark.parametrize(
    "raw,msg",
    [
        ({"limits": {"sample_limit": 0}}, "limits.sample_limit: must be a positive integer"),
        ({"limits": {"sample_limit": True}}, "limits.sample_limit: must be a positive integer"),
        ({"limits": {"samples": 5}}, "limits: unknown key 'samples'"),
        ({"limits": [1]}, "limits: must be a mapping"),
        ({"targets": [{"url": "http://a:1", "limits": {"engine_limit": -1}}]}, "targets[0].limits.engine_limit"),
    ],
)
def test_invalid_limits_are_config_errors(raw: dict[str, object], msg: str) -> None:
    with pytest.raises(ConfigError) as err:
        from_mapping(raw)
    assert any(msg in e for e in err.value.errors), err.value.errors


async def test_per_target_sample_limit_reaches_the_poll_and_is_counted() -> None:
    from kvoffload_exporter.config.limits import Limits

    good = fixture_text("h200-0.6b/A_12_final.prom")

    async def metrics(request: web.Request) -> web.Response:
        return web.Response(text=good, content_type="text/plain")

    up = web.Application()
    up.router.add_get("/metrics", metrics)
    upstream = TestServer(up)
    await upstream.start_server()
    url = f"http://127.0.0.1:{upstream.port}"
    config = Config(
        targets=(TargetConfig(url=url, name="a", limits=Limits(sample_limit=5)), TargetConfig(url=url, name="b")),
        poll_interval=0.05,
        timeout=0.5,
        gpu_enabled=False,
        window=10.0,
    )
    try:
        async with TestClient(TestServer(make_app(config))) as client:
            text = await metrics_after_polls(client)
    finally:
        await upstream.close()
    assert 'kvoffload_up{target="a"} 0.0' in text and 'kvoffload_up{target="b"} 1.0' in text
    line = next(
        x for x in text.splitlines() if x.startswith('kvoffload_scrape_errors_total{target="a",reason="sample_limit"}')
    )
    assert float(line.rsplit(" ", 1)[1]) >= 2


@pytest.mark.parametrize(
    "url,out",
    [
        ("http://u:p@h:1/x", "http://h:1/x"),
        ("https://user@host/metrics?token=abc&x=1", "https://host/metrics?token=<redacted>&x=<redacted>"),
        ("http://[::1]:8000", "http://[::1]:8000"),
        ("http://a:b@[::1]:8000/", "http://[::1]:8000/"),
        ("http://h:1", "http://h:1"),
        ("http://u:p@h:notaport", "<redacted>"),
    ],
)
def test_redact_url_drops_userinfo_and_masks_query_values(url: str, out: str) -> None:
    from kvoffload_exporter.redact import redact_text, redact_url

    assert redact_url(url) == out
    assert "s3cr3t" not in redact_text("cannot reach http://me:s3cr3t@h:1", "http://me:s3cr3t@h:1")


def test_top_level_limits_come_from_flags_and_environment_like_every_setting(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from kvoffload_exporter.cli import build_parser
    from kvoffload_exporter.commands.serve import config_from_args

    cfg_file = tmp_path / "c.yaml"
    cfg_file.write_text("limits: {sample_limit: 500, engine_limit: 4}\ntargets: [http://a:1]\n")
    args = build_parser().parse_args(["serve", "--config.file", str(cfg_file), "--limits.sample-limit", "700"])
    cfg = config_from_args(args, environ={"KVOFFLOAD_LIMITS_LABEL_VALUE_LENGTH_LIMIT": "64"})
    assert cfg.limits == Limits(sample_limit=700, label_value_length_limit=64, engine_limit=4)
    bad = build_parser().parse_args(["serve", "--target", "http://a:1", "--limits.engine-limit", "0"])
    with pytest.raises(ConfigError) as err:
        config_from_args(bad, environ={})
    assert err.value.errors == ["--limits.engine-limit: must be a positive integer"]

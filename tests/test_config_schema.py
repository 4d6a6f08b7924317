"""The one settings declaration: YAML, flags and KVOFFLOAD_* variables agree, errors name what was written,
shorthands and "did you mean", target credentials, and the exporter-toolkit style flags."""

from __future__ import annotations

import argparse
import json
import logging
from dataclasses import fields
from pathlib import Path

import pytest

from kvoffload_exporter.canary.config import CanarySettings
from kvoffload_exporter.cli import build_parser
from kvoffload_exporter.commands.serve import config_from_args
from kvoffload_exporter.config.flags import switch_values
from kvoffload_exporter.config.limits import Limits
from kvoffload_exporter.config.schema import env_name, specs
from kvoffload_exporter.config.settings import (
    BasicAuth,
    BearerToken,
    Config,
    ConfigError,
    TargetConfig,
    from_mapping,
    redact_url,
)
from kvoffload_exporter.server.logs import JsonFormatter, LogfmtFormatter, LogSettings


def _serve(*argv: str) -> argparse.Namespace:
    return build_parser().parse_args(["serve", *argv])


@pytest.mark.parametrize("cls", [Config, TargetConfig, CanarySettings, LogSettings, Limits])
def test_every_setting_is_declared_once_with_help(cls: type) -> None:
    declared = {f.name for f, _ in specs(cls)}
    undeclared = {f.name for f in fields(cls)} - declared - {"targets", "sections", "auth", "extra_auth", "limits"}
    assert not undeclared, f"fields without a declaration: {undeclared}"
    assert all(s.help for _, s in specs(cls))


def test_flags_and_environment_variables_are_unique_and_prefixed() -> None:
    flags: list[str] = []
    envs: list[str] = []
    for cls, section in ((Config, ""), (CanarySettings, "canary"), (LogSettings, "log"), (Limits, "limits")):
        for f, s in specs(cls):
            flags += [*s.flags.get("serve", ()), *s.old]
            if s.env:
                envs.append(env_name(section, f, s))
    assert len(flags) == len(set(flags)) and len(envs) == len(set(envs))
    assert all(e.startswith("KVOFFLOAD_") for e in envs) and "KVOFFLOAD_API_KEY" not in envs


def test_serve_flags_are_built_from_the_declaration() -> None:
    sub = build_parser()._subparsers._group_actions[0].choices["serve"]  # type: ignore[union-attr]
    options = {o for a in sub._actions for o in a.option_strings}
    for cls in (Config, CanarySettings, LogSettings):
        for _, s in specs(cls):
            names = (
                {n for name in s.flags.get("serve", ()) for n in switch_values(name)}
                if s.action == "switch"
                else set(s.flags.get("serve", ()))
            )
            assert names | set(s.old) <= options


def test_precedence_file_then_environment_then_flags(tmp_path: Path) -> None:
    f = tmp_path / "c.yaml"
    f.write_text("targets: [http://a:1]\nwindow: 10m\npoll_interval: 2s\ncanary: {interval: 20m}\n")
    env = {"KVOFFLOAD_STATE_WINDOW": "15m", "KVOFFLOAD_POLL_INTERVAL": "3", "KVOFFLOAD_CANARY_INTERVAL": "30m"}
    cfg = config_from_args(_serve("--config.file", str(f), "--state.window", "20m"), env)
    assert cfg.window == 1200 and cfg.poll_interval == 3 and cfg.canary.interval == 1800
    assert config_from_args(_serve("--config.file", str(f)), {}).window == 600


def test_a_multi_error_message_has_no_trailing_space() -> None:
    """The first line of a multi-error message ends in the colon, no line ends in a space."""
    message = str(ConfigError(["listen: bad", "poll_interval: must be > 0"]))
    assert message.splitlines()[0] == "invalid configuration:"
    assert not [line for line in message.splitlines() if line != line.rstrip()]
    assert str(ConfigError(["listen: bad"])) == "invalid configuration: listen: bad"


def test_errors_name_the_key_the_flag_or_the_variable(tmp_path: Path) -> None:
    f = tmp_path / "c.yaml"
    f.write_text("targets: [http://a:1]\nwindow: forever\n")
    with pytest.raises(ConfigError, match=r"^invalid configuration: window: not a duration"):
        config_from_args(_serve("--config.file", str(f)), {})
    with pytest.raises(ConfigError, match=r"--state\.window: not a duration"):
        config_from_args(_serve("--target", "http://a:1", "--state.window", "forever"), {})
    with pytest.raises(ConfigError, match="KVOFFLOAD_STATE_WINDOW: not a duration"):
        config_from_args(_serve("--target", "http://a:1"), {"KVOFFLOAD_STATE_WINDOW": "forever"})
    with pytest.raises(ConfigError, match="KVOFFLOAD_COLLECTOR_HOST: must be true or false"):
        config_from_args(_serve("--target", "http://a:1"), {"KVOFFLOAD_COLLECTOR_HOST": "maybe"})


def test_variables_follow_the_flags_and_the_former_names_still_work() -> None:
    from kvoffload_exporter.variables import renamed, renamed_variables

    assert renamed()["KVOFFLOAD_WINDOW"] == "KVOFFLOAD_STATE_WINDOW"
    assert renamed()["KVOFFLOAD_GPU_ENABLED"] == "KVOFFLOAD_COLLECTOR_GPU"
    serve = _serve("--target", "http://a:1")
    assert config_from_args(serve, {"KVOFFLOAD_WINDOW": "7m", "KVOFFLOAD_GPU_ENABLED": "false"}).window == 420
    assert not config_from_args(serve, {"KVOFFLOAD_GPU_ENABLED": "false"}).gpu_enabled
    assert config_from_args(serve, {"KVOFFLOAD_WINDOW": "7m", "KVOFFLOAD_STATE_WINDOW": "8m"}).window == 480
    assert renamed_variables({"KVOFFLOAD_WINDOW": "7m", "KVOFFLOAD_STATE_WINDOW": "8m"}) == [
        "variable KVOFFLOAD_WINDOW is deprecated; use KVOFFLOAD_STATE_WINDOW"
    ]


def test_every_error_is_listed_at_once_with_suggestions() -> None:
    with pytest.raises(ConfigError) as e:
        from_mapping(
            {
                "targts": [],
                "windw": "5m",
                "host": {"cgroop": "auto"},
                "canary": {"intervl": "5m", "strategy": "presure"},
                "targets": [{"url": "http://a:1", "nam": "x"}],
            }
        )
    text = "\n".join(e.value.errors)
    assert len(e.value.errors) == 6
    for needle in (
        "unknown key 'targts' (did you mean 'targets'?)",
        "unknown key 'windw' (did you mean 'window'?)",
        "unknown key 'host.cgroop' (did you mean 'host.cgroup'?)",
        "canary: unknown key 'intervl' (did you mean 'interval'?)",
        "canary.strategy: must be one of pressure, wait, got 'presure' (did you mean 'pressure'?)",
        "targets[0]: unknown key 'nam' (did you mean 'name'?)",
    ):
        assert needle in text


def test_shorthands() -> None:
    cfg = from_mapping({"targets": "http://a:1", "gpu": False, "host": False, "canary": True})
    assert [t.url for t in cfg.targets] == ["http://a:1"]
    assert not cfg.gpu_enabled and not cfg.host_enabled and cfg.canary.enabled
    assert from_mapping({"gpu": {"enabled": True}, "host": None}).gpu_enabled


def test_canary_settings_are_typed_on_the_config() -> None:
    cfg = from_mapping({"canary": {"interval": "10m", "budget_tokens_per_hour": None}})
    assert isinstance(cfg.canary, CanarySettings) and cfg.canary.interval == 600
    assert cfg.canary.budget_tokens_per_hour is None


def test_non_finite_and_absurd_values_are_refused() -> None:
    for raw, needle in (
        ({"poll_interval": float("nan")}, "poll_interval: not a duration"),
        ({"window": float("inf")}, "window: not a duration"),
        ({"window": 1e20}, "at most 366d"),
        ({"targets": [{"url": "http://a:1", "tier_bytes": float("inf")}]}, "tier_bytes must be a finite number"),
        ({"canary": {"confidence": float("nan")}}, "canary.confidence: must be a finite number"),
        ({"canary": {"seed": True}}, "canary.seed: must be an integer"),
    ):
        with pytest.raises(ConfigError, match=needle):
            from_mapping(raw)


# --- targets: URL forms and credentials -----------------------------------------------------------


def test_userinfo_becomes_basic_auth_and_leaves_the_url_and_label(caplog: pytest.LogCaptureFixture) -> None:
    cfg = from_mapping({"targets": ["http://alice:s%40cr3tpw@vllm:8000/"]})
    (t,) = cfg.targets
    assert t.url == "http://vllm:8000" and t.label == "vllm:8000"
    assert t.auth == BasicAuth("alice", "s@cr3tpw")
    assert t.headers() == {"Authorization": "Basic YWxpY2U6c0BjcjN0cHc="}
    assert "cr3tpw" not in repr(cfg) + str(t) + caplog.text
    assert TargetConfig("http://u:p@h:1").label == "h:1"
    assert redact_url("https://u:p@h:1/x") == "https://h:1/x" and redact_url("http://h:1") == "http://h:1"


def test_password_and_bearer_token_files(tmp_path: Path) -> None:
    (tmp_path / "pw").write_text("pa55-w0rd\n")
    (tmp_path / "tok").write_text("t0ken-0f-b\n")
    cfg = from_mapping(
        {
            "targets": [
                {"url": "http://a:1", "username": "bob", "password_file": str(tmp_path / "pw")},
                {"url": "http://b:1", "bearer_token_file": str(tmp_path / "tok")},
            ]
        }
    )
    a, b = cfg.targets
    assert a.auth == BasicAuth("bob", "pa55-w0rd") and b.auth == BearerToken("t0ken-0f-b")
    assert b.headers() == {"Authorization": "Bearer t0ken-0f-b"}
    assert "pa55" not in repr(cfg) and "t0ken" not in repr(cfg)
    (tmp_path / "empty").write_text("\n")
    with pytest.raises(ConfigError, match="is empty"):
        from_mapping({"targets": [{"url": "http://a:1", "bearer_token_file": str(tmp_path / "empty")}]})


def test_a_url_ending_in_metrics_is_the_base_url_logged_once(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING):
        cfg = from_mapping({"targets": ["http://a:8000/metrics", "http://b:8000/v/metrics/", "http://c:8000"]})
    assert [t.url for t in cfg.targets] == ["http://a:8000", "http://b:8000/v", "http://c:8000"]
    assert caplog.text.count("ends in /metrics") == 2 and "using http://a:8000 as the base URL" in caplog.text


# --- exporter-toolkit conventions -----------------------------------------------------------------


def test_exporter_toolkit_aliases() -> None:
    args = _serve("--target", "http://a:1", "--web.listen-address", ":9500", "--web.telemetry-path", "/m")
    cfg = config_from_args(args, {})
    assert cfg.listen == ":9500" and cfg.listen_host_port == ("0.0.0.0", 9500) and cfg.telemetry_path == "/m"
    args = _serve("--log.level", "debug", "--log.format", "json")
    from kvoffload_exporter.server.logs import from_args

    assert from_args(args) == LogSettings(level="DEBUG", format="json")


async def test_telemetry_path_serves_the_metrics(aiohttp_client) -> None:  # type: ignore[no-untyped-def]
    from kvoffload_exporter.server.app import make_app

    app = make_app(Config(telemetry_path="/custom", host_enabled=False, gpu_enabled=False))
    client = await aiohttp_client(app)
    assert (await client.get("/custom")).status == 200
    assert (await client.get("/metrics")).status == 404
    assert "href='/custom'" in await (await client.get("/")).text()


def test_log_formats() -> None:
    rec = logging.LogRecord("kvoffload", logging.WARNING, __file__, 1, 'target "a" down', None, None)
    assert json.loads(JsonFormatter().format(rec))["msg"] == 'target "a" down'
    line = LogfmtFormatter().format(rec)
    assert "level=warning" in line and 'msg="target \\"a\\" down"' in line


def test_demo_help_shows_the_demo_defaults(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        build_parser().parse_args(["demo", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "(default 2)" in text and "(default 1m)" in text and "(default 1);" in text
    assert "(default 5)" not in text.split("--poll.interval")[1][:120]


def test_check_flags_are_built_from_the_canary_declaration() -> None:
    from kvoffload_exporter.commands.check import inputs_from_args, settings_from_args

    args = build_parser().parse_args(
        [
            "check",
            "--target",
            "http://a:1/metrics",
            "--wait-initial",
            "1m",
            "--no-flush",
            "--budget-tokens-per-hour",
            "9",
        ]
    )
    given = dict(vars(args))
    inputs = inputs_from_args(args)
    s = inputs.settings
    assert s.wait_initial == 60 and not s.flush and s.budget_tokens_per_hour == 9 and inputs.target == "http://a:1"
    assert vars(args) == given  # read, never written
    default = settings_from_args(build_parser().parse_args(["check", "--target", "http://a:1"]))
    assert default.budget_tokens_per_hour is None and default.settle == 0.5 and default.request_timeout == 120


def test_check_reads_each_prefix_length_once_with_the_settings_bounds() -> None:
    from kvoffload_exporter.commands.check import inputs_from_args
    from kvoffload_exporter.config.settings import ConfigError

    args = build_parser().parse_args(["check", "--target", "http://a:1", "--prefix-tokens", "1024,6144"])
    inputs = inputs_from_args(args)
    assert inputs.settings.prefix_tokens == 1024 and inputs.sweep_lengths == (1024, 6144)
    assert args.prefix_tokens == "1024,6144" and not hasattr(args, "sweep_prefix_tokens")
    one = inputs_from_args(build_parser().parse_args(["check", "--target", "http://a:1", "--prefix-tokens", "512"]))
    assert one.settings.prefix_tokens == 512 and one.sweep_lengths == ()
    with pytest.raises(ConfigError, match="--prefix-tokens: must be an integer >= 1, got 0"):
        inputs_from_args(build_parser().parse_args(["check", "--target", "http://a:1", "--prefix-tokens", "1024,0"]))


def test_file_and_flag_errors_are_listed_together(tmp_path: Path) -> None:
    f = tmp_path / "c.yaml"
    f.write_text("targets: [http://a:1]\nwindow: forever\n")
    with pytest.raises(ConfigError) as e:
        config_from_args(_serve("--config.file", str(f), "--poll.interval", "soon"), {"KVOFFLOAD_POLL_TIMEOUT": "x"})
    assert [m.split(":")[0] for m in e.value.errors] == ["window", "--poll.interval", "KVOFFLOAD_POLL_TIMEOUT"]


def test_cross_field_checks_run_after_the_flags(tmp_path: Path) -> None:
    f = tmp_path / "c.yaml"
    f.write_text("targets: [http://a:1]\nwindow: 6s\n")  # < two default poll intervals, fixed by the flag
    assert config_from_args(_serve("--config.file", str(f), "--poll.interval", "1"), {}).window == 6
    with pytest.raises(ConfigError, match="two poll intervals"):
        config_from_args(_serve("--config.file", str(f)), {})

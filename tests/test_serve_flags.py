"""`serve`'s flags in one style: each setting once in --help under its exporter-toolkit name, every earlier
spelling still accepted (hidden, the same value, one notice per process), a disagreement between the two
refused in one line, abbreviations refused."""

from __future__ import annotations

import argparse
import json
import re

import pytest

from kvoffload_exporter.cli import build_parser, main
from kvoffload_exporter.config import flags
from kvoffload_exporter.config.flags import deprecations, renamed
from kvoffload_exporter.configdoc import serve_parser

T = ("--target", "http://127.0.0.1:9")
REQUIRED = (
    "--web.listen-address",
    "--config.file",
    "--config.check",
    "--log.level",
    "--log.format",
    "--collector.gpu",
    "--no-collector.gpu",
    "--collector.host",
    "--no-collector.host",
    "--web.telemetry-path",
    "--web.config.file",
    "--web.enable-lifecycle",
    "--poll.interval",
    "--poll.timeout",
    "--state.window",
    "--canary.enabled",
    "--canary.allow-pressure",
    "--canary.budget-tokens-per-hour",
    "--canary.interval",
    "--canary.prefix-tokens",
    "--canary.chunk-tokens",
    "--canary.secret-file",
    "--canary.api-key-file",
    "--canary.control-target",
    "--limits.sample-limit",
    "--target",
)
VALUES = {  # a valid value for each renamed flag that takes one
    "--config.file": "/etc/kvoffload/exporter.yaml",
    "--web.listen-address": "0.0.0.0:9466",
    "--poll.interval": "2s",
    "--state.window": "10m",
    "--poll.timeout": "1s",
    "--log.level": "DEBUG",
    "--canary.budget-tokens-per-hour": "1000",
    "--canary.interval": "1m",
    "--canary.prefix-tokens": "512",
    "--canary.chunk-tokens": "256",
    "--canary.secret-file": "/var/lib/kvoffload/secret",
    "--canary.api-key-file": "/run/secrets/key",
    "--canary.control-target": "http://control:8000",
}
RENAMED = renamed(serve_parser())


@pytest.fixture(autouse=True)
def _fresh_notices(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test is its own process as far as the once-per-process notices go."""
    monkeypatch.setattr(flags, "WARNED", set())
    deprecations()


def _parse(*argv: str) -> dict[str, object]:
    return {k: v for k, v in vars(build_parser().parse_args(["serve", *argv])).items() if k != "func"}


def _takes_value(flag: str) -> bool:
    return serve_parser()._option_string_actions[flag].nargs != 0


def test_help_shows_each_setting_once_under_its_new_name() -> None:
    text = serve_parser().format_help()
    options = text.split("options:", 1)[1]
    entries = [re.findall(r"--[\w.\[\]-]+", line.split("  ")[1]) for line in options.splitlines() if line[:4] == "  --"]
    assert all(entries), "every option line names its flags"
    by_dest: dict[str, list[list[str]]] = {}
    for names in entries:
        dest = serve_parser()._option_string_actions[names[0]].dest
        by_dest.setdefault(dest, []).append(names)
    twice = {d: e for d, e in by_dest.items() if len(e) > 1}
    assert not twice, f"settings listed more than once: {twice}"
    for names in entries:  # one spelling, or the exporter-toolkit pair --x / --no-x
        assert len(names) == 1 or names == [names[0], "--no-" + names[0][2:]], names
    shown = {n for names in entries for n in names}
    assert set(REQUIRED) <= shown, sorted(set(REQUIRED) - shown)
    words = set(re.findall(r"--[\w.-]+", text))
    visible_old = sorted(old for old, _ in RENAMED if old in words)
    assert not visible_old, f"former spellings visible in serve --help: {visible_old}"


def test_every_former_spelling_is_renamed_to_a_flag_help_shows() -> None:
    text = serve_parser().format_help()
    assert len(RENAMED) == 18
    for old, new in RENAMED:
        assert re.search(rf"(?<![\w.-]){re.escape(new)}(?![\w.-])", text), (old, new)
        assert serve_parser()._option_string_actions[old].help == argparse.SUPPRESS


@pytest.mark.parametrize(("old", "new"), RENAMED, ids=[old for old, _ in RENAMED])
def test_former_spelling_gives_the_same_value_and_one_notice(old: str, new: str) -> None:
    value = (VALUES[new],) if _takes_value(new) else ()
    assert new not in VALUES or value, new
    expected = _parse(new, *value)
    assert deprecations() == []
    assert _parse(old, *value) == expected
    assert deprecations() == [f"flag {old} is deprecated; use {new}"]
    assert _parse(old, *value, old, *value) == expected  # again, even twice: no second notice
    assert deprecations() == []


def test_switch_spellings_keep_what_they_set() -> None:
    assert _parse("--no-gpu")["gpu_enabled"] is False
    assert _parse("--no-host")["host_enabled"] is False
    assert _parse("--collector.gpu")["gpu_enabled"] is True
    assert _parse("--canary")["canary_enabled"] is True
    assert _parse("--no-canary.enabled")["canary_enabled"] is False
    assert _parse("--canary-allow-pressure")["canary_allow_pressure"] is True
    assert _parse()["gpu_enabled"] is None  # not given: the environment and the file decide


def test_notice_is_one_log_line_on_stderr(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["serve", *T, "--listen", "127.0.0.1:0", "--listen", "127.0.0.1:0", "--config.check"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 0
    assert len(err) == 1 and err[0].endswith("flag --listen is deprecated; use --web.listen-address"), err


def test_notice_follows_the_log_format(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["serve", *T, "--no-gpu", "--log.format", "json", "--config-check"])
    lines = [json.loads(line) for line in capsys.readouterr().err.strip().splitlines()]
    assert code == 0
    assert [d["msg"] for d in lines] == [
        "flag --no-gpu is deprecated; use --no-collector.gpu",
        "flag --config-check is deprecated; use --config.check",
    ]


@pytest.mark.parametrize(
    "argv",
    [
        ("--listen", "127.0.0.1:1", "--web.listen-address", "127.0.0.1:2"),
        ("--web.listen-address", "127.0.0.1:2", "--listen", "127.0.0.1:1"),
        ("--collector.gpu", "--no-gpu"),
        ("--no-canary.enabled", "--canary"),
        ("--poll.interval", "5s", "--poll-interval", "6s"),
        ("--config.file", "a.yaml", "--config", "b.yaml"),
    ],
)
def test_former_and_new_spelling_that_disagree_are_refused_in_one_line(
    argv: tuple[str, ...], capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as e:
        main(["serve", *T, *argv, "--config.check"])
    err = capsys.readouterr().err.strip().splitlines()
    assert e.value.code == 2
    assert len(err) == 1 and "error:" in err[0] and "disagree" in err[0], err
    assert argv[0] in err[0] and argv[-2 if _takes_value(argv[-2]) else -1] in err[0], err
    assert deprecations() == []  # refused: no notice waits for a log


def test_former_and_new_spelling_that_agree_are_one_setting() -> None:
    assert _parse("--poll.interval", "5", "--poll-interval", "5s")["poll_interval"] == "5s"
    assert _parse("--no-gpu", "--no-collector.gpu")["gpu_enabled"] is False
    assert deprecations() == [
        "flag --poll-interval is deprecated; use --poll.interval",
        "flag --no-gpu is deprecated; use --no-collector.gpu",
    ]


@pytest.mark.parametrize(
    ("argv", "hint"),
    [
        (("--web.listen", "127.0.0.1:1"), "--web.listen-address"),
        (("--config.ch",), "--config.check"),
        (("--poll-int", "5s"), "--poll.interval"),  # a former spelling is not abbreviated either
        (("--listn", "127.0.0.1:1"), "--web.listen-address"),  # and hints at the flag that replaces it
    ],
)
def test_abbreviations_are_refused(argv: tuple[str, ...], hint: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as e:
        main(["serve", *T, *argv])
    err = capsys.readouterr().err
    assert e.value.code == 2 and "unrecognized arguments" in err and f"(did you mean {hint}?)" in err, err


def test_demo_spells_the_exporter_settings_as_serve_and_check_keeps_its_names() -> None:
    demo = build_parser().parse_args(
        [
            *("demo", "--web.listen-address", "x:1", "--poll.interval", "1", "--state.window", "1m"),
            *("--no-collector.host", "--log.level", "DEBUG"),
        ]
    )
    got = (demo.listen, demo.poll_interval, demo.window, demo.host_enabled, demo.log_level)
    assert got == ("x:1", "1", "1m", False, "DEBUG")
    check = build_parser().parse_args(["check", *T, "--api-key-file", "/k", "--request-timeout", "5s", "--no-flush"])
    assert (check.api_key_file, check.request_timeout, check.flush) == ("/k", "5s", False)
    assert deprecations() == []
    with pytest.raises(SystemExit):
        build_parser().parse_args(["check", *T, "--canary.api-key-file", "/k"])


def test_demo_keeps_the_former_spellings_hidden_with_one_notice_each() -> None:
    flags.WARNED.difference_update({"--listen", "--no-host", "--rate"})
    demo = build_parser().parse_args(["demo", "--listen", "x:1", "--no-host", "--rate", "2"])
    assert (demo.listen, demo.host_enabled, demo.traffic) == ("x:1", False, 2.0)
    assert deprecations() == [
        "flag --listen is deprecated; use --web.listen-address",
        "flag --no-host is deprecated; use --no-collector.host",
        "flag --rate is deprecated; use --traffic-rate",
    ]


def test_check_keeps_its_former_spellings_hidden_with_one_notice_each() -> None:
    flags.WARNED.difference_update({"--budget-tokens", "--timeout"})
    check = build_parser().parse_args(["check", *T, "--budget-tokens", "9", "--timeout", "5s"])
    assert (check.budget_tokens_per_hour, check.request_timeout) == ("9", "5s")
    assert deprecations() == [
        "flag --budget-tokens is deprecated; use --budget-tokens-per-hour",
        "flag --timeout is deprecated; use --request-timeout",
    ]

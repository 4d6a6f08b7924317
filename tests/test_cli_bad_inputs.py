"""Bad input never ends in a traceback: one clean line on stderr and a non-zero exit, for every command.

Each case runs the real CLI entry point in-process (`kvoffload_exporter.cli.main`); a case that crashed would
raise out of `main` and fail here, a case that printed more than one line or to stdout fails too."""

from __future__ import annotations

import logging
import socket
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from kvoffload_exporter.cli import main

T = ("--target", "http://127.0.0.1:9")
CC = ("--config.check",)
Files = dict[str, str | bytes]


def _yaml(text: str) -> Files:
    return {"c.yaml": text}


# (id, argv with {tmp} for the per-case directory, files to create there, substring expected on stderr)
CASES: list[tuple[str, tuple[str, ...], Files, str]] = [
    # serve: targets
    ("serve-no-target", ("serve", *CC), {}, "at least one --target"),
    ("serve-ipv6-unclosed", ("serve", "--target", "http://[::1", *CC), {}, "--target: url must be http(s)"),
    ("serve-ftp-target", ("serve", "--target", "ftp://x", *CC), {}, "must be http(s)"),
    ("serve-empty-host", ("serve", "--target", "http://", *CC), {}, "must be http(s)"),
    ("serve-target-port-99999", ("serve", "--target", "http://a:99999", *CC), {}, "must be http(s)"),
    ("serve-target-port-abc", ("serve", "--target", "http://a:abc", *CC), {}, "must be http(s)"),
    ("serve-target-query", ("serve", "--target", "http://a:1/?x=1", *CC), {}, "without ?query"),
    ("serve-duplicate-targets", ("serve", *T, *T, *CC), {}, "duplicate target"),
    # serve: listen
    (
        "serve-listen-port-99999",
        ("serve", *T, "--web.listen-address", "127.0.0.1:99999", *CC),
        {},
        "--web.listen-address:",
    ),
    ("serve-listen-port-abc", ("serve", *T, "--web.listen-address", "127.0.0.1:abc", *CC), {}, "--web.listen-address:"),
    ("serve-listen-no-port", ("serve", *T, "--web.listen-address", "localhost", *CC), {}, "--web.listen-address:"),
    ("serve-listen-bad-host", ("serve", *T, "--web.listen-address", "bad host:1", *CC), {}, "not a host name"),
    ("serve-web-listen-bad", ("serve", *T, "--web.listen-address", "[::1:9466", *CC), {}, "--web.listen-address:"),
    ("serve-listen-non-local", ("serve", *T, "--web.listen-address", "203.0.113.7:9466"), {}, "cannot listen on"),
    # serve: durations and numbers
    ("serve-poll-.nan", ("serve", *T, "--poll.interval", ".nan", *CC), {}, "--poll.interval: not a duration"),
    ("serve-poll-nan", ("serve", *T, "--poll.interval", "nan", *CC), {}, "--poll.interval: not a duration"),
    ("serve-poll-zero", ("serve", *T, "--poll.interval", "0", *CC), {}, "--poll.interval: must be > 0"),
    ("serve-poll-negative", ("serve", *T, "--poll.interval", "-1", *CC), {}, "--poll.interval: not a duration"),
    ("serve-window-1e30h", ("serve", *T, "--state.window", "1e30h", *CC), {}, "--state.window: not a duration"),
    ("serve-window-1e20h", ("serve", *T, "--state.window", "1e20h", *CC), {}, "--state.window: not a duration"),
    ("serve-window-huge", ("serve", *T, "--state.window", "99999999h", *CC), {}, "at most 366d"),
    ("serve-window-parsecs", ("serve", *T, "--state.window", "5parsecs", *CC), {}, "--state.window: not a duration"),
    ("serve-timeout-inf", ("serve", *T, "--poll.timeout", "inf", *CC), {}, "--poll.timeout: not a duration"),
    ("serve-timeout-too-long", ("serve", *T, "--poll.timeout", "100", *CC), {}, "10 poll intervals"),
    ("serve-window-too-short", ("serve", *T, "--state.window", "1s", *CC), {}, "two poll intervals"),
    ("serve-poll-tiny", ("serve", *T, "--poll.interval", "1ms", *CC), {}, "--poll.interval: must be at least 0.01s"),
    ("serve-window-too-long", ("serve", *T, "--state.window", "366d", *CC), {}, "more than 100000 poll intervals"),
    ("serve-telemetry-no-slash", ("serve", *T, "--web.telemetry-path", "metrics", *CC), {}, "--web.telemetry-path"),
    ("serve-telemetry-healthz", ("serve", *T, "--web.telemetry-path", "/healthz", *CC), {}, "taken by"),
    ("serve-log-level", ("serve", *T, "--log.level", "LOUD", *CC), {}, "--log.level: must be one of"),
    ("serve-log-format", ("serve", *T, "--log.format", "xml", *CC), {}, "--log.format: must be one of"),
    ("serve-unknown-flag", ("serve", *T, "--windw", "5m"), {}, "(did you mean --state.window?)"),
    ("serve-flag-without-value", ("serve", *T, "--poll.interval"), {}, "expected one argument"),
    # serve: config file
    ("config-missing", ("serve", "--config.file", "{tmp}/nope.yaml", *CC), {}, "cannot read"),
    ("config-not-yaml", ("serve", "--config.file", "{tmp}/c.yaml", *CC), _yaml("targets: [: :\n"), "not valid YAML"),
    ("config-not-utf8", ("serve", "--config.file", "{tmp}/c.yaml", *CC), {"c.yaml": b"a: \xff\xfe\n"}, "not UTF-8"),
    ("config-top-list", ("serve", "--config.file", "{tmp}/c.yaml", *CC), _yaml("- a\n"), "top level must be a mapping"),
    ("config-window-1e20h", ("serve", *T, "--config.file", "{tmp}/c.yaml", *CC), _yaml("window: 1e20h\n"), "window:"),
    (
        "config-poll-.nan",
        ("serve", *T, "--config.file", "{tmp}/c.yaml", *CC),
        _yaml("poll_interval: .nan\n"),
        "poll_interval:",
    ),
    (
        "config-poll-bool",
        ("serve", *T, "--config.file", "{tmp}/c.yaml", *CC),
        _yaml("poll_interval: yes\n"),
        "poll_interval:",
    ),
    (
        "config-tier-bytes-inf",
        ("serve", "--config.file", "{tmp}/c.yaml", *CC),
        _yaml("targets: [{url: 'http://a:1', tier_bytes: .inf}]\n"),
        "tier_bytes must be a finite number",
    ),
    (
        "config-tier-bytes-negative",
        ("serve", "--config.file", "{tmp}/c.yaml", *CC),
        _yaml("targets: [{url: 'http://a:1', tier_bytes: -5}]\n"),
        "tier_bytes must be a number > 0",
    ),
    (
        "config-target-port",
        ("serve", "--config.file", "{tmp}/c.yaml", *CC),
        _yaml("targets: [{url: 'http://a:1', port: 99999}]\n"),
        "port must be an integer from 1 to 65,535, got 99,999",
    ),
    ("config-typo", ("serve", *T, "--config.file", "{tmp}/c.yaml", *CC), _yaml("windw: 5m\n"), "did you mean 'window'"),
    (
        "config-gpu-string",
        ("serve", *T, "--config.file", "{tmp}/c.yaml", *CC),
        _yaml("gpu: maybe\n"),
        "gpu: must be a mapping",
    ),
    (
        "config-cgroup",
        ("serve", *T, "--config.file", "{tmp}/c.yaml", *CC),
        _yaml("host: {cgroup: sideways}\n"),
        "host.cgroup: must be one of",
    ),
    (
        "config-body-cap",
        ("serve", *T, "--config.file", "{tmp}/c.yaml", *CC),
        _yaml("max_body_bytes: 10\n"),
        "max_body_bytes",
    ),
    (
        "config-targets-int",
        ("serve", "--config.file", "{tmp}/c.yaml", *CC),
        _yaml("targets: 5\n"),
        "targets: must be a list",
    ),
    (
        "config-listen-int",
        ("serve", *T, "--config.file", "{tmp}/c.yaml", *CC),
        _yaml("listen: 9466\n"),
        "listen: must be",
    ),
    (
        "config-password-file-missing",
        ("serve", "--config.file", "{tmp}/c.yaml", *CC),
        _yaml("targets: [{url: 'http://a:1', username: u, password_file: /nonexistent/pw}]\n"),
        "cannot read password_file",
    ),
    (
        "config-password-file-without-user",
        ("serve", "--config.file", "{tmp}/c.yaml", *CC),
        {"c.yaml": "targets: [{url: 'http://a:1', password_file: '{tmp}/pw'}]\n", "pw": "s3cret\n"},
        "password_file needs username",
    ),
    (
        "config-bearer-and-userinfo",
        ("serve", "--config.file", "{tmp}/c.yaml", *CC),
        {"c.yaml": "targets: [{url: 'http://u:p@a:1', bearer_token_file: '{tmp}/tok'}]\n", "tok": "t\n"},
        "bearer_token_file excludes basic auth",
    ),
    (
        "config-canary-interval",
        ("serve", *T, "--config.file", "{tmp}/c.yaml", *CC),
        _yaml("canary: {interval: soon}\n"),
        "canary.interval",
    ),
    (
        "config-canary-pressure",
        ("serve", *T, "--config.file", "{tmp}/c.yaml", *CC),
        _yaml("canary: {strategy: pressure}\n"),
        "allow_pressure",
    ),
    (
        "config-canary-inline-key",
        ("serve", *T, "--config.file", "{tmp}/c.yaml", *CC),
        _yaml("canary: {api_key: sk-live-123}\n"),
        "api_key_file",
    ),
    # serve: canary flags
    (
        "canary-api-key-file-missing",
        ("serve", *T, "--canary.enabled", "--canary.api-key-file", "{tmp}/nokey", *CC),
        {},
        "cannot read API key",
    ),
    (
        "canary-budget-abc",
        ("serve", *T, "--canary.budget-tokens-per-hour", "abc", *CC),
        {},
        "--canary.budget-tokens-per-hour",
    ),
    (
        "canary-interval-1e30h",
        ("serve", *T, "--canary.enabled", "--canary.interval", "1e30h", *CC),
        {},
        "--canary.interval",
    ),
    (
        "canary-control-ftp",
        ("serve", *T, "--canary.enabled", "--canary.control-target", "ftp://x", *CC),
        {},
        "--canary.control-target",
    ),
    # check
    ("check-no-target", ("check",), {}, "required: --target"),
    ("check-target-ipv6", ("check", "--target", "http://[::1"), {}, "--target: url must be"),
    ("check-target-userinfo", ("check", "--target", "http://u:pw-0f-check@a:1"), {}, "not supported by check"),
    ("check-rounds-zero", ("check", *T, "--rounds", "0"), {}, "--rounds: must be"),
    ("check-rounds-abc", ("check", *T, "--rounds", "abc"), {}, "invalid int value"),
    ("check-wait-initial-zero", ("check", *T, "--wait-initial", "0"), {}, "--wait-initial: must be > 0"),
    ("check-timeout-negative", ("check", *T, "--request-timeout", "-1"), {}, "--request-timeout: not a duration"),
    ("check-min-samples", ("check", *T, "--min-samples", "3"), {}, "--min-samples: must be an integer >= 5"),
    # /proc passes an access() check for root; only a real write finds out, and it must before the run
    ("check-out-proc", ("check", *T, "--out", "/proc/kvoffload-x"), {}, "--out: cannot write the bundle into"),
    ("check-json-proc", ("check", *T, "--json", "/proc/kvoffload-x/c.json"), {}, "--json: cannot write"),
    ("check-settle-nan", ("check", *T, "--settle", "nan"), {}, "--settle: not a duration"),
    ("check-prefix-tokens", ("check", *T, "--prefix-tokens", "0"), {}, "--prefix-tokens"),
    ("check-api-key-missing", ("check", *T, "--api-key-file", "{tmp}/nokey"), {}, "cannot read API key"),
    ("check-control-ftp", ("check", *T, "--control-target", "ftp://x"), {}, "--control-target"),
    (
        "check-control-userinfo",
        ("check", *T, "--control-target", "http://u:pw-0f-check@c:1"),
        {},
        "must not contain user",
    ),
    # inspect
    ("inspect-missing", ("inspect", "{tmp}/nope.prom"), {}, "cannot read"),
    ("inspect-directory", ("inspect", "{tmp}"), {}, "cannot read"),
    ("inspect-not-utf8", ("inspect", "{tmp}/a.prom"), {"a.prom": b"\xff\xfe\n"}, "not UTF-8"),
    ("inspect-garbage", ("inspect", "{tmp}/a.prom"), {"a.prom": 'vllm:x{a="1"\n'}, "a.prom"),
    ("inspect-no-vllm", ("inspect", "{tmp}/a.prom"), {"a.prom": "other 1\n"}, "no vllm: metrics"),
    ("inspect-no-args", ("inspect",), {}, "required: file"),
    # bundle
    ("bundle-out-unwritable", ("bundle", "--out", "{tmp}/file/sub"), {"file": "x"}, "cannot write under"),
    ("bundle-no-out", ("bundle",), {}, "required: --out"),
    # simulate
    ("simulate-listen-99999", ("simulate", "--listen", "127.0.0.1:99999"), {}, "listen must be HOST:PORT"),
    ("simulate-duration-nan", ("simulate", "--duration", "nan"), {}, "--duration"),
    ("simulate-engines-abc", ("simulate", "--engines", "abc"), {}, "--engines"),
    ("simulate-calibration", ("simulate", "--calibration", "nope"), {}, "--calibration"),
    # demo
    ("demo-duration-negative", ("demo", "--duration", "-5"), {}, "--duration"),
    ("demo-window-1e30h", ("demo", "--state.window", "1e30h"), {}, "--state.window: not a duration"),
    ("demo-listen-99999", ("demo", "--web.listen-address", "127.0.0.1:99999"), {}, "listen"),
    ("demo-sim-listen", ("demo", "--sim-listen", "abc"), {}, "listen must be HOST:PORT"),
    ("demo-status-interval-nan", ("demo", "--status-interval", "nan"), {}, "--status-interval"),
    ("demo-poll-.nan", ("demo", "--poll.interval", ".nan"), {}, "--poll.interval: not a duration"),
    # top level
    ("unknown-command", ("frobnicate",), {}, "invalid choice"),
]


def test_the_table_has_at_least_58_cases_across_every_command() -> None:
    assert len(CASES) >= 58 and len({c[0] for c in CASES}) == len(CASES)
    assert {c[1][0] for c in CASES} >= {"serve", "check", "inspect", "bundle", "simulate", "demo"}


@pytest.fixture(autouse=True)
def _restore_logging() -> Iterator[None]:
    """`main` installs a root handler on the captured stderr; later tests must not write to it."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)


@pytest.fixture
def busy_port() -> Iterator[int]:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen(1)
    try:
        yield s.getsockname()[1]
    finally:
        s.close()


def _run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    try:
        code = main(argv)
    except SystemExit as e:  # argparse exits with a code; `SystemExit("text")` is printed by Python itself
        if isinstance(e.code, int):
            code = e.code
        else:
            print(e.code, file=sys.stderr)
            code = 1
    out, err = capsys.readouterr()
    return code, out, err


def _assert_one_clean_line(code: int, out: str, err: str, needle: str) -> None:
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert code != 0
    assert "Traceback" not in err + out
    assert len(lines) == 1, err
    assert needle in lines[0], lines[0]
    assert out == "", "errors go to stderr"


def _materialise(tmp_path: Path, files: Files, argv: tuple[str, ...]) -> list[str]:
    for name, content in files.items():
        p = tmp_path / name
        if isinstance(content, bytes):
            p.write_bytes(content)
        else:
            p.write_text(content.replace("{tmp}", str(tmp_path)))
    return [a.replace("{tmp}", str(tmp_path)) for a in argv]


@pytest.mark.parametrize(("argv", "files", "needle"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_input_gives_one_clean_line(
    argv: tuple[str, ...], files: Files, needle: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = _run(_materialise(tmp_path, files, argv), capsys)
    _assert_one_clean_line(code, out, err, needle)


def test_listen_port_in_use_is_one_line_before_any_listening_line(
    busy_port: int, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = _run(["serve", *T, "--web.listen-address", f"127.0.0.1:{busy_port}"], capsys)
    _assert_one_clean_line(code, out, err, f"cannot listen on 127.0.0.1:{busy_port}")
    assert "listening" not in err


def test_secrets_in_bad_input_are_not_echoed(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cases: list[Callable[[], list[str]]] = [
        lambda: ["serve", "--target", "http://user:hunter2@[::1", *CC],
        lambda: ["serve", "--target", "http://user:hunter2@a:99999", *CC],
        lambda: ["check", "--target", "http://user:hunter2@a:1"],
        lambda: ["check", "--target", "http://a:1", "--control-target", "http://user:hunter2@b:1"],
    ]
    for argv in cases:
        code, out, err = _run(argv(), capsys)
        assert code != 0 and "hunter2" not in out + err, err


def test_an_unknown_kvoffload_variable_is_named_with_a_did_you_mean() -> None:
    """`KVOFFLOAD_WINDOWS=10m` used to be ignored without a word; every variable the settings read is known."""
    from kvoffload_exporter.variables import unknown_variables, variables

    env = {"KVOFFLOAD_WINDOWS": "10m", "KVOFFLOAD_STATE_WINDOW": "10m", "KVOFFLOAD_API_KEY": "k", "PATH": "/bin"}
    assert unknown_variables(env) == [
        "KVOFFLOAD_WINDOWS is not a kvoffload-exporter variable (did you mean KVOFFLOAD_STATE_WINDOW?)"
    ]
    assert unknown_variables({"KVOFFLOAD_WINDOW": "10m"}) == []  # a former name: read, with its own notice
    assert {"KVOFFLOAD_POLL_INTERVAL", "KVOFFLOAD_CANARY_INTERVAL", "KVOFFLOAD_LIMITS_SAMPLE_LIMIT"} <= variables()
    assert unknown_variables({"KVOFFLOAD_XYZZY": "1"}) == ["KVOFFLOAD_XYZZY is not a kvoffload-exporter variable"]


def test_serve_warns_about_an_unknown_variable_at_start(tmp_path: Path) -> None:
    import os
    import subprocess

    env = {**os.environ, "KVOFFLOAD_WINDOWS": "10m"}
    argv = [sys.executable, "-m", "kvoffload_exporter", "serve", "--target", "http://127.0.0.1:9", "--config.check"]
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and "KVOFFLOAD_WINDOWS is not a kvoffload-exporter variable" in done.stderr


def test_a_yaml_error_keeps_the_parsers_words_with_line_and_column(tmp_path: Path) -> None:
    from kvoffload_exporter.config.settings import ConfigError, load_file

    path = tmp_path / "c.yaml"
    path.write_text("targets:\n  - url: http://x\n    name: [a\n")
    with pytest.raises(ConfigError) as e:
        load_file(str(path))
    assert "line 4 column 1: not valid YAML: did not find expected ',' or ']'" in str(e.value)
    path.write_text("targets:\n  - url: 'http://user:s3cret-token@x'\n  bad: [\n")
    with pytest.raises(ConfigError) as e:
        load_file(str(path))
    assert "s3cret" not in str(e.value)  # a longer quote from the file is still masked


def test_a_duration_error_names_its_unit(capsys: pytest.CaptureFixture[str]) -> None:
    """`--state.window 5` is 5 seconds: the error says so instead of leaving the reader to guess."""
    assert main(["serve", "--target", "http://127.0.0.1:9", "--state.window", "5", "--config.check"]) == 2
    err = capsys.readouterr().err
    assert (
        "window: 5s must cover at least two poll intervals (poll interval 5s; a number without a unit is seconds)"
        in err
    )


def test_unlimited_budget_is_accepted_in_yaml_as_in_the_environment(tmp_path: Path) -> None:
    from kvoffload_exporter.config.settings import load_file

    path = tmp_path / "c.yaml"
    path.write_text(
        "targets:\n  - url: http://127.0.0.1:9\ncanary:\n  enabled: true\n  budget_tokens_per_hour: unlimited\n"
    )
    assert load_file(str(path)).canary.budget_tokens_per_hour is None  # type: ignore[attr-defined]


def test_a_bad_path_exits_2_in_every_command(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """One exit-code table: usage errors and paths a command cannot use are 2 everywhere (inspect and bundle
    used to exit 1 where check exits 2)."""
    with pytest.raises(SystemExit) as e:
        main(["inspect", str(tmp_path / "missing.prom")])
    assert e.value.code == 2
    (tmp_path / "plain").write_text("x")
    assert main(["bundle", "--out", str(tmp_path / "plain" / "sub")]) == 2
    err = capsys.readouterr().err
    assert "cannot read" in err and "cannot write under" in err


@pytest.mark.parametrize(
    "argv,hint",
    [
        (["serve", "--web.listen-addres", "127.0.0.1:0"], "--web.listen-address"),
        (["check", "--target", "http://127.0.0.1:9", "--allow-pres"], "--allow-pressure"),
        (["inspect", "--jso", "x.prom"], "--json"),
    ],
)
def test_abbreviated_flags_are_refused_with_a_did_you_mean(
    argv: list[str], hint: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """argparse accepts a unique prefix by default: a typo would silently set another flag's value."""
    with pytest.raises(SystemExit) as e:
        main(argv)
    err = capsys.readouterr().err
    assert e.value.code == 2 and f"did you mean {hint}?" in err and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize(
    "argv,command,said",
    [
        (["serve", "--targt", "http://a:1"], "serve", ["(did you mean --target?)"]),
        (
            ["serve", "--targt", "http://a:1", "--listn", "x"],
            "serve",
            ["--targt: did you mean --target?", "--listn: did you mean --web.listen-address?"],
        ),
        (["check", "--target", "http://a:1", "--roundz", "3", "--zzzz"], "check", ["--roundz: did you mean --rounds?"]),
        (["bundle", "--out", "x", "--selektor", "a=b"], "bundle", ["(did you mean --selector?)"]),
        (["--bogus"], None, []),
    ],
)
def test_an_unknown_flag_points_to_its_commands_help_and_each_gets_its_suggestion(
    argv: list[str], command: str | None, said: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as e:
        main(argv)
    err = capsys.readouterr().err
    prog = f"kvoffload-exporter {command}" if command else "kvoffload-exporter"
    assert e.value.code == 2 and len(err.strip().splitlines()) == 1
    assert err.startswith(f"{prog}: error: unrecognized arguments: ") and err.strip().endswith(f"(see {prog} --help)")
    for s in said:
        assert s in err, (s, err)
    if "--zzzz" in argv:
        assert "--zzzz: no such flag" in err

"""Configuration that cannot take the process down: YAML aliases refused (no "billion laughs"), a size
cap checked before parsing, errors that name the file and line but never echo its content, duplicate
targets found in one pass, and an allow_regex that cannot backtrack."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from kvoffload_exporter.config.settings import MAX_CONFIG_BYTES, ConfigError, load_file
from kvoffload_exporter.saferegex import SafeRegex, UnsafeRegex

BOMB = (
    "\n".join(
        ['a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
        + [
            f"{chr(98 + i)}: &{chr(98 + i)} [*{chr(97 + i)},*{chr(97 + i)},*{chr(97 + i)},*{chr(97 + i)},*{chr(97 + i)},"
            f"*{chr(97 + i)},*{chr(97 + i)},*{chr(97 + i)},*{chr(97 + i)}]"
            for i in range(8)
        ]
    )
    + "\n"
)


def test_a_yaml_alias_bomb_is_refused_before_it_expands(tmp_path: Path) -> None:
    p = tmp_path / "bomb.yaml"
    p.write_text(BOMB)
    assert len(BOMB) < 1000
    with pytest.raises(ConfigError) as e:
        load_file(str(p))
    assert "aliases" in str(e.value) and "line 2" in str(e.value)


def test_a_config_over_the_size_cap_is_refused_unread(tmp_path: Path) -> None:
    p = tmp_path / "big.yaml"
    with open(p, "wb") as f:
        f.truncate(MAX_CONFIG_BYTES + 1)  # sparse: nothing to parse would fit in the test's time anyway
    with pytest.raises(ConfigError, match="cap"):
        load_file(str(p))


def test_a_fifo_is_refused_unopened_even_with_a_writer(tmp_path: Path) -> None:
    p = tmp_path / "fifo.yaml"
    os.mkfifo(p)
    writer = subprocess.Popen(  # more than the cap, then it exits (or is killed once refused)
        [
            sys.executable,
            "-c",
            f"import sys\nwith open(sys.argv[1], 'wb') as f:\n    f.write(b'#' * {MAX_CONFIG_BYTES + 2})",
            str(p),
        ],
        stderr=subprocess.DEVNULL,
    )
    try:
        with pytest.raises(ConfigError, match="is a FIFO, not a regular file"):
            load_file(str(p))
    finally:
        writer.kill()
        writer.wait()


def test_yaml_errors_name_the_line_and_never_echo_the_content(tmp_path: Path) -> None:
    secret = tmp_path / "secret"
    secret.write_text("targets: [http://x:1]\nsk-SECRET-VALUE: !vault 'sk-SECRET-VALUE'\n")
    link = tmp_path / "config.yaml"
    link.symlink_to(secret)
    with pytest.raises(ConfigError) as e:
        load_file(str(link))
    msg = str(e.value)
    assert "line 2" in msg and "SECRET" not in msg and "\n" not in msg


def test_ten_thousand_targets_are_checked_and_duplicates_found(tmp_path: Path) -> None:
    urls = [f"http://10.{i // 250}.{i % 250}.1:8000" for i in range(10_000)]
    p = tmp_path / "fleet.yaml"
    p.write_text("targets:\n" + "".join(f"  - {u}\n" for u in [*urls, urls[17], urls[9999]]))
    with pytest.raises(ConfigError) as e:
        load_file(str(p))
    errors = [x for x in e.value.errors if "duplicate" in x]
    assert errors == [
        f"targets: duplicate target name '{urls[17][7:]}' (set `name`)",
        f"targets: duplicate target name '{urls[9999][7:]}' (set `name`)",
    ]


@pytest.mark.parametrize("pattern", [r"(a)\1", r"(?=a).*", r"(?<=a)b", r"(?(1)a|b)", r"a\b", r"(?>a+)", r"a*+"])
def test_constructs_that_need_backtracking_are_refused(pattern: str) -> None:
    with pytest.raises(UnsafeRegex):
        SafeRegex(pattern)


def test_counted_repeats_cannot_blow_up_the_program() -> None:
    with pytest.raises(UnsafeRegex, match="too large"):
        SafeRegex(r"(x{1000}){1000}")


@pytest.mark.parametrize(
    "pattern,text,expected",
    [
        (r"https?://vllm-[a-z0-9-]+\.ns(\.svc)?:8000", "http://vllm-3.ns.svc:8000", True),
        (r"https?://vllm-[a-z0-9-]+\.ns(\.svc)?:8000", "http://vllm-3.ns.svc:8000.evil", False),
        (r"(?i)HTTP://A.*", "http://abc", True),
        (r"(a+)+$", "a" * 2000 + "!", False),  # seconds to forever with a backtracking engine
        (r"(a|aa)*b", "a" * 2000, False),
        (r"(a|aa)*b", "a" * 2000 + "b", True),
    ],
)
def test_matching_agrees_with_python_re_without_backtracking(pattern: str, text: str, expected: bool) -> None:
    assert SafeRegex(pattern).fullmatch(text) is expected


@pytest.mark.parametrize("kind", ["fifo", "device", "huge"])
def test_secret_files_that_never_end_are_refused_unread(tmp_path: Path, kind: str) -> None:
    secret = tmp_path / "password"
    if kind == "fifo":
        os.mkfifo(secret)  # no writer: an open() without O_NONBLOCK would wait forever
    elif kind == "device":
        secret.symlink_to("/dev/zero")
    else:
        secret.write_bytes(b"x" * (1 << 20))
    conf = tmp_path / "c.yaml"
    conf.write_text(f"targets:\n  - url: http://127.0.0.1:1\n    username: u\n    password_file: {secret}\n")
    with pytest.raises(ConfigError) as e:
        load_file(str(conf))
    assert ("regular file" in str(e.value)) if kind != "huge" else ("over" in str(e.value))
    assert "xxxx" not in str(e.value)

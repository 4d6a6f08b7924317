"""Errors a new user meets read like the docs: a close key gets "did you mean", numbers have thousands
separators instead of `2.14748e+09`."""

from __future__ import annotations

import pytest

from kvoffload_exporter.cli import main
from kvoffload_exporter.config.schema import did_you_mean, human, integer, number


@pytest.mark.parametrize(
    ("x", "text"),
    [(1024, "1,024"), (1 << 31, "2,147,483,648"), (2147483648.0, "2,147,483,648"), (0.25, "0.25"), (-5, "-5")],
)
def test_human_numbers(x, text):
    assert human(x) == text


def test_integer_bounds_are_written_out_in_full():
    with pytest.raises(ValueError) as e:
        integer(1024, 1 << 31)(5, False)
    assert str(e.value) == "must be an integer from 1,024 to 2,147,483,648, got 5"
    assert "e+" not in str(e.value)


def test_open_bounds_say_which_end_is_open():
    with pytest.raises(ValueError, match=r"must be a number > 0 and <= 1, got 2"):
        number(0, 1, lo_open=True)(2.0, False)


def test_max_body_bytes_error_in_the_config_file(tmp_path, capsys):
    cfg = tmp_path / "c.yaml"
    cfg.write_text("max_body_bytes: 5\ntargets: [{url: 'http://a:1'}]\n")
    assert main(["serve", "--config.file", str(cfg), "--config.check"]) == 2
    err = capsys.readouterr().err
    assert "1,024 to 2,147,483,648" in err and "e+09" not in err


def test_did_you_mean_helper():
    assert did_you_mean("reuse_windw", ["reuse_window", "absent_for"]) == " (did you mean 'reuse_window'?)"
    assert did_you_mean("zzz", ["reuse_window"]) == ""


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--set", "reuse_windw=2h"], "unknown setting 'reuse_windw' (did you mean 'reuse_window'?)"),
        (["--set", "canary_stale_second=5"], "(did you mean 'canary_stale_seconds'?)"),
        (["--preset", "rehersal"], "(did you mean 'rehearsal'?)"),
        (["--set", "zzz=1"], "known: reuse_window,"),
    ],
)
def test_bundle_set_and_preset_suggest_the_close_key(tmp_path, capsys, args, needle):
    pytest.importorskip("grafanalib")
    assert main(["bundle", "--out", str(tmp_path / "b"), *args]) == 2
    err = capsys.readouterr().err
    assert needle in err and err.count("\n") == 1
    assert not (tmp_path / "b").exists()


@pytest.mark.parametrize(
    ("text", "seconds", "prometheus"),
    [
        ("20", 20.0, "20s"),
        ("20.5", 20.5, "20s500ms"),
        ("90m", 5400.0, "90m"),
        ("1h30m", 5400.0, "1h30m"),
        ("1.5h", 5400.0, "1h30m"),
        ("1d2h", 93600.0, "1d2h"),
        ("2d", 172800.0, "2d"),
    ],
)
def test_one_duration_grammar_everywhere(text: str, seconds: float, prometheus: str) -> None:
    """serve, check, the YAML file and `bundle --set` read durations alike: Prometheus durations (`1h30m`)
    and plain seconds; the rules get Prometheus's form."""
    from kvoffload_exporter.bundle.settings import DEFAULT
    from kvoffload_exporter.cli import build_parser
    from kvoffload_exporter.commands.serve import config_from_args
    from kvoffload_exporter.config.schema import parse_duration, prometheus_duration

    assert parse_duration(text) == seconds and prometheus_duration(text) == prometheus
    args = build_parser().parse_args(["serve", "--target", "http://a:1", "--state.window", text])
    assert config_from_args(args, {}).window == seconds
    assert DEFAULT.with_sets([f"reuse_window={text}"]).reuse_window == prometheus


@pytest.mark.parametrize("text", ["30m1h", "1h 30m", "-1", "5parsecs", "", "0.0001"])
def test_a_bad_duration_is_one_line_everywhere(text: str) -> None:
    from kvoffload_exporter.bundle.settings import DEFAULT
    from kvoffload_exporter.config.schema import prometheus_duration

    with pytest.raises(ValueError, match="wants a duration such as 2 \\(seconds\\), 30s, 5m or 1h30m"):
        DEFAULT.with_sets([f"reuse_window={text}"])
    with pytest.raises(ValueError):
        prometheus_duration(text)


def test_simulate_and_demo_durations_take_the_same_grammar() -> None:
    from kvoffload_exporter.commands.simulate import positive_seconds

    assert positive_seconds("90") == 90.0 and positive_seconds("1h30m") == 5400.0 and positive_seconds("1.5s") == 1.5
    for bad in ("0", "nan", "1h30x", "-5"):
        with pytest.raises(Exception, match=r"duration|> 0"):
            positive_seconds(bad)

"""`inspect` and the CLI surface."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from conftest import FIXTURES

from kvoffload_exporter import __version__
from kvoffload_exporter.cli import main


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "kvoffload_exporter", *args], capture_output=True, text=True)


def test_version_and_help() -> None:
    r = _run("--version")
    assert r.returncode == 0 and __version__ in r.stdout
    r = _run("--help")
    assert r.returncode == 0 and "serve" in r.stdout and "inspect" in r.stdout


def test_inspect_two_files_json(capsys: pytest.CaptureFixture[str]) -> None:
    d = FIXTURES / "h200-0.6b"
    assert (
        main(["inspect", str(d / "A_04_after_pressure.prom"), str(d / "A_05_after_cpu_tier_hit.prom"), "--json"]) == 0
    )
    doc = json.loads(capsys.readouterr().out)
    assert doc["generation"] == "flat" and doc["mode"] == "interval"
    (e,) = doc["engines"]
    assert (e["model_name"], e["engine"], e["state"]) == ("Qwen/Qwen3-0.6B", "0", "hit")
    assert e["offload_load_bytes"] == 682622976 and e["offload_store_bytes"] == 0
    assert e["external_prefix_hits"] == 5952


def test_inspect_one_file_is_cumulative(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["inspect", str(FIXTURES / "h200-0.6b" / "A_12_final.prom"), "--json"]) == 0
    (e,) = json.loads(capsys.readouterr().out)["engines"]
    assert e["offload_load_bytes"] == 14804844544 and e["offload_store_bytes"] == 54147416064
    assert e["state"] is None and e["state_reason"] is None  # one sample: no window, no claim


def test_inspect_table_and_legacy_generation(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["inspect", str(FIXTURES / "reconstructed" / "C_v0.16-0.23.prom")]) == 0
    out = capsys.readouterr().out
    assert "generation: transfer_type" in out and "7,516,192,768" in out
    row = out.splitlines()[2].split()
    assert row[:4] == ["Qwen/Qwen3-0.6B", "0", "-", "-"]  # one dump claims no state and no reason
    assert "state: needs two dumps" in out


def test_inspect_errors_are_clear(tmp_path) -> None:  # type: ignore[no-untyped-def]
    r = _run("inspect", str(tmp_path / "missing.prom"))
    assert r.returncode != 0 and "cannot read" in r.stderr
    empty = tmp_path / "x.prom"
    empty.write_text("<html></html>\n")
    r = _run("inspect", str(empty))
    assert r.returncode != 0 and "no vllm: metrics" in r.stderr


def test_serve_config_errors_listed_together(tmp_path) -> None:  # type: ignore[no-untyped-def]
    cfg = tmp_path / "c.yaml"
    cfg.write_text("targets:\n  - url: nope\nwindow: forever\nlisten: nowhere\n")
    r = _run("serve", "--config.file", str(cfg), "--config.check")
    assert r.returncode == 2
    for needle in ("url must be http(s)", "window: not a duration", "listen must be HOST:PORT"):
        assert needle in r.stderr
    good = tmp_path / "g.yaml"
    good.write_text("targets: [http://127.0.0.1:8000]\nwindow: 10m\n")
    r = _run("serve", "--config.file", str(good), "--config.check")
    assert r.returncode == 0 and "configuration OK" in r.stdout
    r = _run("serve", "--web.listen-address", "127.0.0.1:1")
    assert r.returncode == 2 and "at least one --target" in r.stderr


def _run_stdin(stdin: bytes, *args: str) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [sys.executable, "-m", "kvoffload_exporter", *args], input=stdin, capture_output=True, timeout=120
    )


def test_inspect_reads_stdin_as_either_file() -> None:
    d = FIXTURES / "h200-0.6b"
    before, after = d / "A_04_after_pressure.prom", d / "A_05_after_cpu_tier_hit.prom"
    r = _run_stdin(after.read_bytes(), "inspect", str(before), "-", "--json")
    assert r.returncode == 0, r.stderr
    (e,) = json.loads(r.stdout)["engines"]
    assert e["offload_load_bytes"] == 682622976 and e["state"] == "hit"
    r = _run_stdin(before.read_bytes(), "inspect", "-", str(after), "--json")
    assert r.returncode == 0 and json.loads(r.stdout)["engines"][0]["external_prefix_hits"] == 5952
    r = _run_stdin(after.read_bytes(), "inspect", "-")
    assert r.returncode == 0 and b"cumulative" in r.stdout


def test_inspect_stdin_errors_are_one_line() -> None:
    r = _run_stdin(b"x", "inspect", "-", "-")
    assert r.returncode != 0 and b"only one" in r.stderr and len(r.stderr.strip().splitlines()) == 1
    r = _run_stdin(b"<html></html>\n", "inspect", "-")
    assert r.returncode != 0 and b"standard input contains no vllm: metrics" in r.stderr
    assert b"Traceback" not in r.stderr


def test_inspect_stdin_has_the_file_size_cap() -> None:
    big = b'vllm:prefix_cache_hits_total{engine="0",model_name="m"} 1\n' + b"# filler\n" * (17 * 1024 * 1024 // 9)
    r = _run_stdin(big, "inspect", "-")
    assert r.returncode != 0 and b"standard input is larger than" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1


def test_inspect_warns_when_counters_go_backwards(capsys: pytest.CaptureFixture[str]) -> None:
    d = FIXTURES / "h200-0.6b"
    later, earlier = str(d / "A_05_after_cpu_tier_hit.prom"), str(d / "A_04_after_pressure.prom")
    assert main(["inspect", later, earlier, "--json"]) == 0
    err = capsys.readouterr().err
    assert "went backwards" in err and "Qwen/Qwen3-0.6B/0" in err and "files in the wrong order?" in err
    assert main(["inspect", earlier, later, "--json"]) == 0
    assert "backwards" not in capsys.readouterr().err


def test_inspect_shows_the_sample_count_with_quantiles(capsys: pytest.CaptureFixture[str]) -> None:
    d = FIXTURES / "h200-0.6b"
    files = [str(d / "A_04_after_pressure.prom"), str(d / "A_05_after_cpu_tier_hit.prom")]
    assert main(["inspect", *files, "--json"]) == 0
    (e,) = json.loads(capsys.readouterr().out)["engines"]
    assert e["ttft_count"] == 2 and e["ttft_seconds"]  # 21 -> 23 requests in the fixture
    assert main(["inspect", *files]) == 0
    (line,) = [x for x in capsys.readouterr().out.splitlines() if x.startswith("TTFT ")]
    assert line.startswith("TTFT Qwen/Qwen3-0.6B/0: p50 ") and line.endswith(" ms (n=2)")


def test_pytest_shows_skip_reasons() -> None:
    """A skipped prometheus/e2e test must say why in every run, not only with a flag nobody passes."""
    import tomllib

    opts = tomllib.loads((FIXTURES.parent.parent / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]
    assert "-rs" in opts["addopts"].split()

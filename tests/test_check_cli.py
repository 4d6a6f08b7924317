"""`check` behaviour beyond the verdicts: exit codes, evidence bundle, JSON schema, budget, API key,
wait strategy, and the real command line against a `simulate` subprocess."""

from __future__ import annotations

import io
import json
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from kvoffload_exporter.canary.cycle.plan import Prompts
from kvoffload_exporter.cli import build_parser
from kvoffload_exporter.commands.check import run_check
from kvoffload_exporter.sim.server import start
from kvoffload_exporter.sim.simulator import SimOptions, Simulator


async def _run(tmp_path: Path, *argv: str, sim: dict[str, Any] | None = None) -> tuple[int, dict[str, Any], str, str]:
    runner = None
    target = "http://127.0.0.1:9"  # discard port: nothing listens
    if sim is not None:
        runner, target = await start(Simulator(SimOptions(time_scale=0.2, seed=5, **sim)))
    try:
        args = build_parser().parse_args(
            ["check", "--target", target, "--settle", "0.01", "--secret-file", str(tmp_path / "secret"), *argv]
        )
        out, err = io.StringIO(), io.StringIO()
        code, doc = await run_check(args, stdout=out, stderr=err)
        return code, doc, out.getvalue(), err.getvalue()
    finally:
        if runner is not None:
            await runner.cleanup()


async def test_unreachable_target_is_an_error(tmp_path: Path) -> None:
    code, doc, text, err = await _run(tmp_path, "--rounds", "1", "--json", str(tmp_path / "c.json"))
    assert code == 3 and doc["verdict"] == "error" and "preflight" in doc["why"]
    assert json.loads((tmp_path / "c.json").read_text())["exit_code"] == 3
    assert text == ""  # nothing ran: no empty report on stdout, one line on stderr
    assert [ln for ln in err.splitlines() if "preflight" in ln] == [f"kvoffload-exporter check: {doc['why']}"]


async def test_bad_flags_are_errors_named_by_flag(tmp_path: Path) -> None:
    # --wait-initial 0 used to pass (check built its settings by hand) and then spun forever doubling 0.
    code, doc, _, err = await _run(tmp_path, "--rounds", "1", "--wait-initial", "0", "--request-timeout", "-1")
    assert code == 2 and doc["verdict"] == "error"  # a bad flag value is a usage error
    assert "--wait-initial: must be > 0" in err and "--request-timeout: not a duration" in err


async def test_json_schema_and_evidence_bundle(tmp_path: Path) -> None:
    out = tmp_path / "ev"
    code, doc, text, err = await _run(
        tmp_path,
        *["--rounds", "2", "--min-samples", "5", "--allow-pressure", "--json", str(tmp_path / "c.json")],
        *["--out", str(out)],
        sim={},
    )
    # --rounds 2 is a floor: the rounds go on until 5 samples per path are counted, so the run decides
    assert doc["rounds_completed"] >= 5 and code == doc["exit_code"] != 3
    on_disk = json.loads((tmp_path / "c.json").read_text())
    assert on_disk["verdict"] == doc["verdict"] and "delta_ttft_seconds" in on_disk and on_disk["advice"]
    for p in on_disk["phases"]:
        for key in ("path", "classification", "ttft_seconds", "load_bytes", "store_bytes", "cached_tokens"):
            assert key in p
    assert {p["path"] for p in on_disk["phases"]} >= {"cold", "gpu_hit", "offload_hit", "displace"}
    files = {f.name for f in out.iterdir()}
    assert files >= {
        "target_metrics_before.prom",
        "target_metrics_after.prom",
        "requests.jsonl",
        "phases.jsonl",
        "cycles.json",
        "conditions.json",
        "report.txt",
        "report.json",
        "ttft.png",
    }
    reqs = [json.loads(line) for line in (out / "requests.jsonl").read_text().splitlines()]
    assert {r["kind"] for r in reqs} == {"probe", "flush", "filler"}
    assert all(r["salt"] in ("family", "fresh") for r in reqs)  # the salt itself never leaves the process
    cond = json.loads((out / "conditions.json").read_text())
    assert cond["conditions"]["target"]["version"] == "0.26.0"
    assert cond["conditions"]["sizing"]["prefix_tokens"] == 5120
    assert cond["conditions"]["target"]["cache_config"]["num_gpu_blocks"] == "640"
    assert (out / "ttft.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert (out / "report.txt").read_text() == text
    assert doc["interval"]["engines"][0]["offload_load_bytes"] > 0  # whole-run counters from the snapshots
    assert "counted 5/5" in err and "round 2 (2 done, counted" in err  # live progress: what the verdict waits for
    secret = (tmp_path / "secret").read_bytes().strip()
    salt = Prompts(secret, "any").salt.encode()
    for f in out.iterdir():
        assert salt not in f.read_bytes() and secret not in f.read_bytes(), f.name


async def test_store_without_load_is_ineffective(tmp_path: Path) -> None:
    code, doc, text, _ = await _run(
        tmp_path, "--rounds", "3", "--allow-pressure", sim={"faults": ("store-without-load",)}
    )
    assert code == 3 and doc["verdict"] == "no_offload_hit"  # a connector problem, named: not "measure longer"
    assert doc["reasons"] == {"no_load": 3} and doc["advice"]["action"] == "check_connector"
    assert "no_offload_hit (exit 3)" in text


async def test_budget_exhaustion_stops_early(tmp_path: Path) -> None:
    code, doc, _, err = await _run(
        tmp_path, "--rounds", "5", "--allow-pressure", "--budget-tokens-per-hour", "60000", sim={}
    )
    assert "token budget exhausted after 1 rounds" in err
    assert doc["rounds_completed"] == 1 and code == 4
    assert doc["tokens_spent"] <= 60000


async def test_api_key_from_file_and_never_in_evidence(tmp_path: Path) -> None:
    key = "sk-canary-test-123"
    code, doc, _, _ = await _run(tmp_path, "--rounds", "1", sim={"api_key": key})
    assert code == 3 and "auth" in doc["why"]
    (tmp_path / "key").write_text(key + "\n")
    out = tmp_path / "ev"
    code, doc, text, err = await _run(
        tmp_path,
        "--rounds",
        "1",
        "--min-samples",
        "5",
        "--allow-pressure",
        "--api-key-file",
        str(tmp_path / "key"),
        "--out",
        str(out),
        "--json",
        str(tmp_path / "c.json"),
        sim={"api_key": key},
    )
    assert doc["rounds_completed"] >= 5 and doc["verdict"] != "error"  # on until --min-samples are counted
    for f in [*out.iterdir(), tmp_path / "c.json"]:
        assert key.encode() not in f.read_bytes(), f.name
    assert key not in text + err


async def test_wait_strategy_without_traffic_never_displaces(tmp_path: Path) -> None:
    code, doc, _, _ = await _run(
        tmp_path, "--rounds", "1", "--wait-initial", "0.05", "--wait-max", "0.2", "--no-recompute-control", sim={}
    )
    assert code == 4 and doc["reasons"] == {"not_displaced": 1}
    # "nothing displaced the prefix" is not "the tier never served a hit": inconclusive, with the way out.
    assert doc["verdict"] == "inconclusive" and doc["why"].startswith("nothing displaced the prefix")
    assert any("--allow-pressure" in h for h in doc["hints"])
    assert [p["classification"] for p in doc["phases"] if p["phase"] == "wait_revisit"] == ["gpu_hit"] * 3
    assert doc["residency_seconds"] == {"gpu": 0.2}


def test_command_line_against_a_simulate_process(tmp_path: Path, free_port: Callable[[], int]) -> None:
    port = free_port()
    sim = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "kvoffload_exporter",
            "simulate",
            "--listen",
            f"127.0.0.1:{port}",
            "--calibration",
            "h200-qwen3-0.6b",
            "--vllm-version",
            "0.32.0",
            "--time-scale",
            "0.2",
            "--seed",
            "9",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
                break
            except OSError:
                assert time.monotonic() < deadline and sim.poll() is None, "simulator did not start"
                time.sleep(0.1)
        r = subprocess.run(
            [
                sys.executable,
                "-m",
                "kvoffload_exporter",
                "check",
                "--target",
                f"http://127.0.0.1:{port}",
                "--rounds",
                "2",
                "--min-samples",
                "5",
                "--allow-pressure",
                "--settle",
                "0.01",
                "--json",
                str(tmp_path / "c.json"),
                "--secret-file",
                str(tmp_path / "secret"),
            ],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
    finally:
        sim.terminate()
        sim.wait(10)
    doc = json.loads((tmp_path / "c.json").read_text())
    assert r.returncode == doc["exit_code"] != 3, r.stderr
    assert doc["recompute_control"] == "honoured"  # 0.32 honours max_load_tokens: no load in the counters
    recompute = [p["classification"] for p in doc["phases"] if p["phase"] == "recompute"]
    assert recompute == ["miss"] * doc["rounds_completed"] and len(recompute) >= 5
    assert "TTFT path" in r.stdout and "round 2 (2 done, counted" in r.stderr


async def test_an_openai_base_url_is_taken_without_its_v1(tmp_path: Path) -> None:
    """`--target http://host:8000/v1` (what OpenAI clients are given) used to fail preflight on /v1/health."""
    from kvoffload_exporter.commands.check import _without_v1

    assert _without_v1("http://h:8000/v1") == _without_v1("http://h:8000/v1/") == "http://h:8000"
    assert _without_v1("http://h:8000/vllm/v1") == "http://h:8000/vllm"
    assert _without_v1("http://h:8000/v10") == "http://h:8000/v10"
    runner, url = await start(Simulator(SimOptions(time_scale=0.2, seed=5)))
    try:
        args = build_parser().parse_args(
            [
                *("check", "--target", f"{url}/v1", "--rounds", "1", "--allow-pressure", "--settle", "0.01"),
                *("--secret-file", str(tmp_path / "secret"), "--json", str(tmp_path / "c.json")),
            ]
        )
        err = io.StringIO()
        _, doc = await run_check(args, stdout=io.StringIO(), stderr=err)
    finally:
        await runner.cleanup()
    assert f"--target {url}/v1 ends in /v1: using {url}" in err.getvalue()
    assert doc["verdict"] != "error" and doc["rounds_completed"] >= 1, doc["why"]


async def test_the_wait_strategy_says_what_it_waits_for_before_its_first_wait(tmp_path: Path) -> None:
    """`check` with no flags on an idle server (the obvious first try) used to print "waiting 30 s", then 60 s,
    doubling for up to half an hour, before saying why or naming --allow-pressure."""
    runner, url = await start(Simulator(SimOptions(time_scale=0.2, seed=5)))
    waits: list[float] = []

    async def sleep(seconds: float) -> None:  # the run's own waits, none really taken
        waits.append(seconds)

    try:
        args = build_parser().parse_args(
            ["check", "--target", url, "--rounds", "1", "--settle", "0.01", "--secret-file", str(tmp_path / "s")]
        )
        err = io.StringIO()
        await run_check(args, stdout=io.StringIO(), stderr=err, sleep=sleep)
    finally:
        await runner.cleanup()
    text = err.getvalue()
    notice = text.find("wait strategy: each round waits for other traffic")
    assert 0 <= notice < text.find("waiting 30 s") and "--allow-pressure displaces it" in text
    assert "(at most 32 min a round)" in text and max(waits) == 960


async def test_ctrl_c_keeps_what_was_measured_marked_interrupted(tmp_path: Path) -> None:
    """Ctrl-C (the run's task cancelled, as asyncio.run does on SIGINT) writes --json and --out with what the
    rounds measured so far, `interrupted: true`, exit 130."""
    import asyncio

    runner, url = await start(Simulator(SimOptions(time_scale=0.2, seed=5)))
    try:
        args = build_parser().parse_args(
            [
                *("check", "--target", url, "--rounds", "50", "--allow-pressure", "--settle", "0.01"),
                *(
                    "--secret-file",
                    str(tmp_path / "s"),
                    "--json",
                    str(tmp_path / "c.json"),
                    "--out",
                    str(tmp_path / "ev"),
                ),
            ]
        )
        err = io.StringIO()
        task = asyncio.ensure_future(run_check(args, stdout=io.StringIO(), stderr=err))
        while "round 2 " not in err.getvalue():  # two rounds done, then Ctrl-C
            assert not task.done(), err.getvalue()
            await asyncio.sleep(0.05)
        task.cancel()
        code, doc = await task
    finally:
        await runner.cleanup()
    assert code == 130 and doc["interrupted"] is True and doc["rounds_completed"] >= 2
    written = json.loads((tmp_path / "c.json").read_text())
    assert written["interrupted"] is True and written["exit_code"] == 130
    assert (tmp_path / "ev" / "requests.jsonl").read_text().count("\n") >= 2
    assert "interrupted: writing what was measured so far" in err.getvalue()

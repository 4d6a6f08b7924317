"""`check` never answers without evidence: a control serving another model, output paths and
URLs refused before the first request, clean one-line connection errors, no interval from < 3 samples,
short samples explained with what to change, an ETA, and the exit codes in `--help`."""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path
from typing import Any

from kvoffload_exporter.canary.cycle.stats import decide
from kvoffload_exporter.cli import build_parser
from kvoffload_exporter.commands.check import run_check
from kvoffload_exporter.sim.server import start
from kvoffload_exporter.sim.simulator import SimOptions, Simulator


async def _run(
    tmp_path: Path, *argv: str, target: str | None = None, sims: tuple[dict[str, Any], ...] = ({},)
) -> tuple[int, dict[str, Any], str, str, list[Simulator]]:
    runners, urls, made = [], [], []
    for opts in sims:
        sim = Simulator(SimOptions(time_scale=0.2, seed=5, **opts))
        runner, url = await start(sim)
        runners.append(runner)
        urls.append(url)
        made.append(sim)
    try:
        argv2 = [a.replace("{control}", urls[-1]) for a in argv]
        args = build_parser().parse_args(
            ["check", "--target", target or urls[0], "--settle", "0.01", "--secret-file", str(tmp_path / "s"), *argv2]
        )
        out, err = io.StringIO(), io.StringIO()
        code, doc = await run_check(args, stdout=out, stderr=err)
        return code, doc, out.getvalue(), err.getvalue(), made
    finally:
        for r in runners:
            await r.cleanup()


async def test_a_control_serving_another_model_is_refused(tmp_path: Path) -> None:
    code, doc, _, _err, sims = await _run(
        tmp_path,
        "--control-target",
        "{control}",
        "--allow-pressure",
        sims=({}, {"calibration": "h200-qwen3-32b", "connector": False}),
    )
    assert code == 3 and doc["verdict"] == "error" and "(model_mismatch)" in doc["why"]
    assert (doc["advice"]["action"], doc["exit_code"]) == ("fix_control", 3)  # names the fix, exits by it
    assert "--control-target" in doc["advice"]["why"]
    assert "'Qwen/Qwen3-32B'" in doc["why"] and "'Qwen/Qwen3-0.6B'" in doc["why"]
    assert sims[0].engines[0].requests == 0  # refused in preflight, no canary request spent


async def test_a_control_that_refuses_the_canary_advises_fixing_the_control(tmp_path: Path) -> None:
    code, doc, _, _err, _sims = await _run(
        tmp_path,
        "--control-target",
        "{control}",
        "--allow-pressure",
        sims=({}, {"connector": False, "faults": ("completions-status=400",)}),
    )
    assert code == 3 and doc["verdict"] == "error"
    assert doc["why"].startswith("the control target refused the canary's completions with HTTP 400")
    assert (doc["advice"]["action"], doc["exit_code"]) == ("fix_control", 3)  # the control's fault, not the target's


async def test_a_target_without_an_offload_connector_advises_configuring_one(tmp_path: Path) -> None:
    code, doc, _, _err, sims = await _run(tmp_path, "--allow-pressure", sims=({"connector": False},))
    assert code == 3 and doc["verdict"] == "error" and "no offload connector" in doc["why"]
    assert (doc["advice"]["action"], doc["exit_code"]) == ("configure_offload", 3)
    assert "--allow-no-offload" in doc["advice"]["why"]
    assert sims[0].engines[0].requests == 0


async def test_output_paths_are_checked_before_the_first_request(tmp_path: Path) -> None:
    (tmp_path / "taken").write_text("x")
    code, _doc, _, err, sims = await _run(
        tmp_path, "--rounds", "1", "--allow-pressure", "--out", str(tmp_path / "taken")
    )
    assert code == 2 and "--out: cannot write the bundle into" in err and "not a directory" in err
    assert sims[0].engines[0].requests == 0
    code, _, _, err, _ = await _run(tmp_path, "--rounds", "1", "--json", str(tmp_path))
    assert code == 2 and "--json: cannot write" in err and "is a directory" in err
    code, _, _, err, _ = await _run(tmp_path, "--rounds", "1", "--json", str(tmp_path / "taken" / "x.json"))
    assert code == 2 and "not a directory" in err


async def test_unreachable_and_invalid_targets_are_one_clean_line(tmp_path: Path) -> None:
    code, doc, text, err, _ = await _run(tmp_path, "--rounds", "1", target="http://127.0.0.1:9")
    assert code == 3 and doc["why"] == (
        "preflight failed (health): http://127.0.0.1:9/health cannot connect (connection refused)"
    )
    for out in (doc["why"], text, err):
        assert "Error" not in out and "Exception" not in out  # no exception class names
    code, _, _, err, _ = await _run(tmp_path, "--rounds", "1", target="gpu0:8000")
    assert code == 2 and len(err.splitlines()) == 1 and "--target: url must be http(s)://HOST:PORT" in err
    # user:password@ is refused as a usage error, and the password is never printed
    code, doc, _, err, _ = await _run(tmp_path, "--rounds", "1", target="http://alice:hunter2@127.0.0.1:9")
    assert code == 2 and "hunter2" not in err and "hunter2" not in doc["why"]


def test_redact_drops_userinfo_from_any_url() -> None:
    from kvoffload_exporter.canary.check.checkrun import redact

    assert (
        redact("GET http://alice:pw@h:8000/x and https://tok@h2/")
        == "GET http://<redacted>@h:8000/x and https://<redacted>@h2/"
    )


def test_no_interval_until_the_confidence_is_reachable() -> None:
    v = decide({"offload_hit": [0.05, 0.06], "cold": [0.04, 0.041]}, 2, min_samples=2)
    assert v.estimates == {} and v.verdict == "inconclusive"
    v = decide({"offload_hit": [0.05, 0.06, 0.055], "cold": [0.04, 0.041, 0.039]}, 3, min_samples=3)
    assert v.estimates == {}  # 3 against 3 reach a 90 % rank-sum interval at most
    v = decide({"offload_hit": [0.05, 0.06, 0.055, 0.052], "cold": [0.04, 0.041, 0.039, 0.042]}, 4, min_samples=4)
    assert "cold" in v.estimates and v.verdict == "offload_slower"


async def test_short_samples_say_why_and_what_to_change(tmp_path: Path) -> None:
    # A budget that allows 2 rounds: the run stops short of the first look (5 samples a path) and says why
    # and what to change.
    code, doc, text, err, _ = await _run(
        tmp_path, "--rounds", "2", "--allow-pressure", "--budget-tokens-per-hour", "150000"
    )
    assert code == 4 and re.match(r"[1-9] offload-hit samples < 5", doc["why"]), doc["why"]
    assert doc["hints"][0].startswith("--rounds ") and "hint: --rounds " in text
    assert "(1 done, counted 1/10, ETA ~" in err and "rounds left at" in err  # the ETA says its basis
    assert doc["advice"]["action"] == "measure_longer" and text.count("advice: ") == 1


def test_help_documents_the_exit_codes(capsys: Any) -> None:
    with contextlib.suppress(SystemExit):
        build_parser().parse_args(["check", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    for code in (
        "0 offload pays off",
        "1 it does not",
        "2 usage error",
        "3 fix something first, the advice names what",
        "4 inconclusive",
        "5 output mismatch",
    ):
        assert code in out
    for action in ("fix_target", "fix_control", "configure_offload", "fix_secret_file", "report_bug"):
        assert action in out


def test_short_samples_count_the_ambiguous_revisits() -> None:
    from kvoffload_exporter.canary.check.checkreport import _short

    def ph(counted: bool, ambiguous: bool, cls: str) -> dict[str, Any]:
        return {"phase": "wait_revisit", "counted": counted, "ambiguous": ambiguous, "classification": cls}

    doc: dict[str, Any] = {
        "why": "6 offload-hit samples < 10",
        "ttft_seconds": {"offload_hit": {"n": 6}, "cold": {"n": 10}},
        "phases": [ph(True, False, "offload_hit")] * 6 + [ph(False, True, "offload_hit")] * 4,
        "conditions": {"strategy": "wait", "control": None},
    }
    hints = _short(doc, min_samples=10, rounds=10)
    assert doc["why"] == (
        "6 offload-hit samples < 10 (revisits left out: 4 ambiguous; ambiguous = other traffic could explain the hit)"
    )
    assert hints[0].startswith("--rounds 17 ") and hints[1].startswith("--allow-pressure")

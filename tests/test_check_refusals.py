"""A target that refuses every completion ends `check` at once with its status and message; one that fails
every request (5xx, 429) is retried with back-off until the retry deadline, saying what it waits for."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest

from kvoffload_exporter.canary.check.retries import Streak, refusal, refused_text, server_message
from kvoffload_exporter.cli import build_parser
from kvoffload_exporter.commands.check import run_check
from kvoffload_exporter.sim.server import start
from kvoffload_exporter.sim.simulator import SimOptions, Simulator


async def _check(tmp_path: Path, fault: str, *argv: str) -> tuple[int, dict[str, Any], str, list[float]]:
    runner, url = await start(Simulator(SimOptions(time_scale=0.2, seed=5, faults=(fault,))))
    waits: list[float] = []

    async def sleep(seconds: float) -> None:  # the run's own time: every wait it asks for, none really taken
        waits.append(seconds)

    try:
        fixed = ["--allow-pressure", "--settle", "0.01", "--out", str(tmp_path / "ev")]
        args = build_parser().parse_args(
            ["check", "--target", url, *fixed, "--secret-file", str(tmp_path / "s"), *argv]
        )
        err = io.StringIO()
        code, doc = await run_check(args, stdout=io.StringIO(), stderr=err, sleep=sleep)
        return code, doc, err.getvalue(), waits
    finally:
        await runner.cleanup()


def _completions(tmp_path: Path) -> list[dict[str, Any]]:
    rows = [json.loads(line) for line in (tmp_path / "ev" / "requests.jsonl").read_text().splitlines()]
    return [r for r in rows if r["status"] is not None]


async def test_a_4xx_on_every_completion_ends_the_run_at_once(tmp_path: Path) -> None:
    code, doc, err, waits = await _check(tmp_path, "completions-status=400")
    assert code == 3 and doc["verdict"] == "error"
    assert (doc["advice"]["action"], doc["exit_code"]) == ("fix_target", 3)  # the fix named, the exit code its own
    assert doc["why"].startswith("the target refused the canary's completions with HTTP 400 (2 attempts in a row)")
    assert '"simulated fault: every completion is answered 400"' in doc["why"]  # the server's words, unwrapped
    assert "rejects the canary's request as sent" in doc["why"]  # what to look at
    assert [r["status"] for r in _completions(tmp_path)] == [400, 400]  # the first and its confirmation
    assert sum(waits) < 1  # no back-off: only the settle delays of the two rounds
    assert "retrying once more at once, to confirm a refusal" in err
    assert f"kvoffload-exporter check: {doc['why']}" in err


@pytest.mark.parametrize("status", [503, 429])
async def test_a_5xx_or_429_on_every_completion_is_retried_until_the_deadline(tmp_path: Path, status: int) -> None:
    code, doc, err, waits = await _check(tmp_path, f"completions-status={status}")
    assert code == 3 and doc["verdict"] == "error"
    assert (doc["advice"]["action"], doc["exit_code"]) == ("fix_target", 3)
    assert doc["why"].startswith("the target failed ") and "(retry deadline 45 s, --retry-deadline)" in doc["why"]
    assert f"last: HTTP {status}: simulated fault: every completion is answered {status}" in doc["why"]
    backoff = [w for w in waits if w != 0.01]  # the settle delays are 0.01 s
    # Retried with back-off up to the deadline; the streak also counts each failed round's own (real) seconds,
    # so on a loaded machine the waits add up to a little less than the deadline.
    assert len(backoff) >= 3 and 40 <= sum(backoff) <= 45
    attempts = _completions(tmp_path)
    assert len(attempts) == len(backoff) + 1 and {r["status"] for r in attempts} == {status}
    lines = [ln for ln in err.splitlines() if "failed (HTTP" in ln]
    assert len(lines) == len(backoff) and all("(retry deadline 45 s)" in ln for ln in lines)
    assert "ETA" not in err  # no round completed: nothing to promise


async def test_the_retry_deadline_is_a_flag(tmp_path: Path) -> None:
    code, doc, _, waits = await _check(tmp_path, "completions-status=503", "--retry-deadline", "3s")
    assert code == 3 and "(retry deadline 3 s, --retry-deadline)" in doc["why"]
    assert sum(w for w in waits if w > 0.01) <= 3


def test_which_answers_are_refusals() -> None:
    assert refusal(400) and refusal(401) and refusal(404) and refusal(422)
    assert not any(refusal(s) for s in (None, 200, 408, 425, 429, 500, 503))


def test_a_refusal_needs_the_same_status_twice_in_a_row() -> None:
    s = Streak(45)
    s.failed(400, 1.0)
    assert s.refused() is None and s.wait(8.0) == 0.0  # confirmed at once, no back-off
    s.failed(404, 1.0)
    assert s.refused() is None  # another status: not the same refusal
    s.failed(404, 1.0)
    assert s.refused() == 404
    s.success()
    s.failed(503, 1.0)
    s.failed(503, 1.0)
    assert s.refused() is None and s.wait(8.0) == 8.0


def test_the_deadline_counts_the_waits_and_the_failed_rounds_after_the_first() -> None:
    s = Streak(10)
    s.failed(503, 100.0)  # the round that opened the streak (it may have waited for a wait ladder)
    assert s.seconds == 0 and s.wait(6.0) == 6.0
    s.waited(6.0)
    s.failed(503, 1.0)
    assert s.seconds == 7.0 and s.wait(2.0) == 2.0 and s.left() == 3.0
    assert s.wait(30.0) == 3.0  # the last attempt falls on the deadline
    s.waited(3.0)
    s.failed(503, 0.0)
    assert s.wait(1.0) is None  # then the run ends


def test_the_servers_message_is_one_line_and_cut() -> None:
    vllm = json.dumps({"error": {"message": "max_tokens\nis too large", "type": "BadRequestError", "code": 400}})
    assert server_message(vllm) == "max_tokens is too large"
    assert server_message('{"detail": "Not Found"}') == "Not Found"
    assert server_message('{"message": "old style", "code": 400}') == "old style"
    assert server_message("<html>bad gateway</html>") == "<html>bad gateway</html>"
    assert server_message("") == "(no message)"
    cut = server_message('{"error": {"message": "' + "x" * 400)  # cut at the client's limit: not JSON
    assert len(cut) == 300 and cut.endswith("...")
    assert "HTTP 401" in refused_text(401, "") and "--api-key-file" in refused_text(401, "")

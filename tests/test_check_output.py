"""The output check end to end against the simulator: a clean tier answers like the GPU and a recompute, a
model blind to the prefix is unverifiable, a corrupting tier is output_mismatch with exit 5."""

from __future__ import annotations

import io
import json
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from aiohttp import web

from kvoffload_exporter.canary.check.advice import EXIT_CODES, Action
from kvoffload_exporter.cli import build_parser
from kvoffload_exporter.commands.check import run_check
from kvoffload_exporter.sim.server import make_app, start
from kvoffload_exporter.sim.simulator import SimOptions, Simulator

ARGS = ("--allow-pressure", "--rounds", "6", "--min-samples", "5", "--prefix-tokens", "1024", "--quiet")


async def _check(tmp_path: Path, **sim: Any) -> tuple[int, dict[str, Any], str]:
    runner, target = await start(Simulator(SimOptions(time_scale=0.1, seed=5, **sim)))
    try:
        args = build_parser().parse_args(
            ["check", "--target", target, "--settle", "0.01", "--secret-file", str(tmp_path / "secret"), *ARGS]
        )
        out = io.StringIO()
        code, doc = await run_check(args, stdout=out, stderr=io.StringIO())
        return code, doc, out.getvalue()
    finally:
        await runner.cleanup()


async def test_a_clean_tier_answers_like_the_gpu_and_a_recompute(tmp_path: Path) -> None:
    code, doc, text = await _check(tmp_path)
    out = doc["output_check"]
    assert out["compared"] >= 10 and out["mismatched"] == 0 and out["sensitive"] is True, out
    assert out["result"] == "equal" and out["method"] == "greedy_token_ids"
    assert {p["pair"] for p in out["pairs"]} == {"offload_vs_gpu", "offload_vs_recompute"}
    assert all(p["equal"] and len(p["offload_token_ids"]) == 8 for p in out["pairs"])
    assert not any("prompt" in k for p in out["pairs"] for k in p)  # token ids of the answers, never the prompt
    assert doc["verdict"] in ("offload_faster", "offload_slower", "inconclusive") and "speed_verdict" not in doc
    assert code == EXIT_CODES[Action(doc["advice"]["action"])]
    assert "output: equal - 0 of" in text


async def test_a_model_blind_to_the_prefix_is_unverifiable_never_equal(tmp_path: Path) -> None:
    _, doc, text = await _check(tmp_path, output_depends_on="last-token")
    out = doc["output_check"]
    assert out["sensitive"] is False and out["result"] == "unverifiable", out
    assert out["compared"] == 0 and out["mismatched"] == 0 and out["unverifiable"] >= 2
    assert doc["verdict"] != "output_mismatch"
    assert "output: unverifiable" in text


async def test_a_tier_that_corrupts_loads_is_output_mismatch_exit_5(tmp_path: Path) -> None:
    code, doc, text = await _check(tmp_path, faults=("corrupt-loads=1",))
    out = doc["output_check"]
    assert out["mismatched"] >= 1 and out["sensitive"] is True, out
    assert doc["verdict"] == "output_mismatch" and code == 5 and doc["exit_code"] == 5
    assert doc["advice"]["action"] == "disable_offload" and doc["speed_verdict"] != "output_mismatch"
    bad = next(p for p in out["pairs"] if not p["equal"])
    assert bad["offload_token_ids"] != bad["reference_token_ids"]
    assert "verdict: output_mismatch (exit 5)" in text


async def test_a_server_whose_ids_are_random_is_unverifiable_never_output_mismatch(tmp_path: Path) -> None:
    """Not reproducible even without a tier: the tier is not blamed for the engine (no exit 5, no page)."""
    code, doc, text = await _check(tmp_path, output_depends_on="random")
    out = doc["output_check"]
    assert out["gpu_reference"]["checked"] >= 1 and out["gpu_reference"]["agreed"] == 0, out["gpu_reference"]
    assert out["mismatched"] == 0 and out["result"] == "unverifiable", out
    assert doc["verdict"] != "output_mismatch" and code != 5
    assert "two GPU hits of the same prompt answered differently" in text and "the tier is not blamed" in text


async def test_a_server_whose_answers_drift_is_never_output_mismatch(tmp_path: Path) -> None:
    """Answers that change every 25 requests: a later GPU hit of the same prompt (sent after the offload
    revisit) shows the drift, so a difference between the GPU revisit and the offload revisit decides nothing."""
    code, doc, _ = await _check(tmp_path, output_depends_on="drift")
    out = doc["output_check"]
    assert out["gpu_reference"]["checked"] >= 1 and not out["gpu_reference"]["decides"], out["gpu_reference"]
    assert out["by_pair"]["offload_vs_gpu"]["mismatched"] == 0, out
    assert doc["verdict"] != "output_mismatch" and code != 5


async def test_a_prefix_blind_model_still_shows_a_corrupting_tier(tmp_path: Path) -> None:
    """The sensitivity probe says whether `equal` means anything, not whether a same-prompt difference
    counts: a load that changes the answer of a reproducible engine is a mismatch (exit 5)."""
    code, doc, text = await _check(tmp_path, output_depends_on="last-token", faults=("corrupt-loads=1",))
    out = doc["output_check"]
    assert out["sensitive"] is False and out["mismatched"] >= 1 and out["gpu_reference"]["decides"], out
    assert out["served_by_load"] >= 1 and 0 < out["detect_at_5pct"] < 1
    assert doc["verdict"] == "output_mismatch" and code == 5
    assert "served by a load from the tier" in text


async def test_a_server_that_refuses_the_seed_is_asked_once_more_without_it(tmp_path: Path) -> None:
    """A 400 naming an optional field: the same request again without it, and never again with it."""
    seen: list[bool] = []

    @web.middleware
    async def no_seed(request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]) -> Any:
        if request.path == "/v1/completions":
            seen.append("seed" in await request.json())
            if seen[-1]:
                return web.json_response({"error": {"message": "Unsupported field: seed", "code": 400}}, status=400)
        return await handler(request)

    app = make_app(Simulator(SimOptions(time_scale=0.1, seed=5)))
    app.middlewares.insert(0, no_seed)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    try:
        argv = ["check", "--target", f"http://127.0.0.1:{port}", "--settle", "0.01", "--out", str(tmp_path / "ev")]
        argv += [
            "--secret-file",
            str(tmp_path / "secret"),
            "--allow-pressure",
            "--rounds",
            "2",
            "--prefix-tokens",
            "1024",
        ]
        _, doc = await run_check(build_parser().parse_args(argv), stdout=io.StringIO(), stderr=io.StringIO())
    finally:
        await runner.cleanup()
    assert seen[:2] == [True, False] and not any(seen[2:]), seen
    assert doc["rounds_completed"] >= 2 and doc["output_check"]["compared"] >= 2, doc["why"]
    rows = [json.loads(line) for line in (tmp_path / "ev" / "requests.jsonl").read_text().splitlines()]
    assert [r["status"] for r in rows][:2] == [400, 200]


async def _sweep(tmp_path: Path, **sim: Any) -> dict[str, Any]:
    runner, target = await start(Simulator(SimOptions(time_scale=0.1, seed=5, version="0.32.0", **sim)))
    try:
        argv = ["check", "--target", target, "--settle", "0.01", "--secret-file", str(tmp_path / "secret")]
        argv += [*ARGS, "--concurrency", "1,4", "--min-bursts", "5"]
        _, doc = await run_check(build_parser().parse_args(argv), stdout=io.StringIO(), stderr=io.StringIO())
        return doc
    finally:
        await runner.cleanup()


async def test_the_load_sweep_compares_every_offload_hit_of_a_burst(tmp_path: Path) -> None:
    clean = await _sweep(tmp_path)
    four = next(e for e in clean["load_sweep"] if e["concurrency"] == 4 and e["source"] == "sweep")
    assert four["output"]["compared"] >= 4 * 5 and four["output"]["mismatched"] == 0, four["output"]
    assert four["output"]["mismatch_rate"] == 0 and clean["output_check"]["mismatched"] == 0
    bad = await _sweep(tmp_path, faults=("corrupt-loads=1",))
    # A confirmed mismatch in the rounds ends the run: no load sweep, no more rounds than it took to see it.
    assert not any(e["source"] == "sweep" for e in bad.get("load_sweep") or []), bad.get("load_sweep")
    assert bad["output_check"]["mismatched"] >= 1 and bad["rounds_completed"] < clean["rounds_completed"] + 1
    assert bad["verdict"] == "output_mismatch" and bad["exit_code"] == 5

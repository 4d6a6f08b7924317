"""The load sweep (`check --concurrency`): the crossover text from entries whose sign flips, the
simulator's load model both ways (one load amortised over concurrent revisits; the vllm#44294 convoy),
and the sweep end to end against the simulator."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest

from kvoffload_exporter.canary.check import sweepreport
from kvoffload_exporter.canary.check.sweep import parse_levels
from kvoffload_exporter.canary.cycle.sequential import Design
from kvoffload_exporter.cli import build_parser
from kvoffload_exporter.commands.check import run_check
from kvoffload_exporter.sim.bursts import bursts
from kvoffload_exporter.sim.server import start
from kvoffload_exporter.sim.simulator import SimOptions, Simulator


def _entry(c: int, delta_ms: float, verdict: str, prefix: int = 5120) -> dict[str, Any]:
    d = delta_ms / 1000
    return {
        "concurrency": c,
        "prefix_tokens": prefix,
        "delta_ttft_seconds": d,
        "verdict": verdict,
        "ci_low_seconds": d - 0.005,
        "ci_high_seconds": d + 0.005,
    }


def test_slower_at_idle_faster_under_load_pays_off_from_the_first_decided_faster_level() -> None:
    cross = sweepreport.crossover(
        [_entry(1, 24.9, "offload_slower"), _entry(4, 12.6, "offload_slower"), _entry(16, -7.1, "offload_faster")]
    )
    assert cross["kind"] == "from" and cross["concurrency"] == 16 and not cross["indicative"]
    assert cross["text"] == "offload is slower at c = 1, 4 and pays off from c = 16"


def test_faster_at_idle_slower_under_load_pays_off_up_to() -> None:
    cross = sweepreport.crossover(
        [_entry(32, 80.0, "offload_slower"), _entry(1, -470.0, "offload_faster"), _entry(8, -300.0, "inconclusive")]
    )
    assert cross["kind"] == "up_to" and cross["concurrency"] == 1 and cross["indicative"]
    assert "undecided at c = 8" in cross["text"]


def test_point_estimates_of_undecided_levels_never_make_a_crossover() -> None:
    wobbly = [_entry(1, 5, "inconclusive"), _entry(4, -5, "inconclusive"), _entry(16, -9, "inconclusive")]
    cross = sweepreport.crossover(wobbly)
    assert cross["kind"] == "undecided" and cross["concurrency"] is None
    assert "pays off" not in cross["text"].replace("no level decided", "")


def test_one_sign_everywhere_or_partly() -> None:
    assert sweepreport.crossover([_entry(1, -5, "offload_faster"), _entry(4, -9, "offload_faster")])["kind"] == "always"
    assert sweepreport.crossover([_entry(1, 5, "offload_slower"), _entry(4, 9, "offload_slower")])["kind"] == "never"
    part = sweepreport.crossover([_entry(1, 5, "offload_slower"), _entry(4, -9, "inconclusive")])
    assert part["kind"] == "partial" and part["indicative"]


def test_entry_has_no_interval_below_min_bursts() -> None:
    lv = sweepreport.Level(4, 5120, "recompute", offload_bursts=[[0.05, 0.06]] * 5, control_bursts=[[0.04, 0.05]] * 5)
    e = sweepreport.entry(lv, min_bursts=6)
    assert e["ci_low_seconds"] is None and e["ci_high_seconds"] is None and e["verdict"] == "inconclusive"
    assert (e["bursts_offload"], e["bursts_control"], e["n_offload"], e["n_control"]) == (5, 5, 10, 10)
    assert any("< --min-bursts 6" in n for n in e["notes"])
    assert sweepreport.entry(lv, min_bursts=5)["ci_low_seconds"] is not None


def test_length_threshold() -> None:
    entries = [_entry(1, 10, "offload_slower", 1024), _entry(1, -20, "offload_faster", 4096)]
    assert sweepreport.length_threshold(entries)["min_prefix_tokens"] == 4096  # type: ignore[index]


def test_levels_parse() -> None:
    assert parse_levels("16,1,4,4") == (1, 4, 16)
    for bad in ("0,4", "a", ""):
        with pytest.raises(ValueError):
            parse_levels(bad)


def _bursts(calibration: str, timing: dict[str, float], levels: tuple[int, ...]) -> dict[int, float]:
    """Noise-free engine: c revisits of one displaced prefix vs c with loads disabled (sim.bursts)."""
    return {r.concurrency: r.delta_ms for r in bursts(calibration, levels, timing)}


def test_simulator_amortised_load_reproduces_the_h200_sign_flip() -> None:
    # One H200, 0.6B shape: +24.9 ms at c=1, +12.6 at c=4, -7.1 at c=16.
    d = _bursts("h200-qwen3-0.6b", {}, (1, 4, 16))
    assert d[1] > d[4] > 0 > d[16]
    assert abs(d[1] - 24.9) < 10 and abs(d[4] - 12.6) < 6 and abs(d[16] + 7.1) < 6


def test_simulator_convoy_turns_a_win_into_a_loss() -> None:
    # vllm#44294: concurrent revisits of one prefix being loaded are serialised.
    d = _bursts("h200-qwen3-32b", {"load_convoy": 1.0, "inflight_recompute": 0.0}, (1, 8, 32))
    assert d[1] < d[8] < 0 < d[32]
    amortised = _bursts("h200-qwen3-32b", {"inflight_recompute": 0.0}, (1, 32))
    assert amortised[32] < 0  # the same shape without the convoy keeps paying off


async def _sweep(
    tmp_path: Path, calibration: str, scale: float, levels: str, timing: dict[str, float], *extra: str
) -> dict[str, Any]:
    runner, url = await start(
        Simulator(SimOptions(calibration=calibration, version="0.32.0", time_scale=scale, seed=3, timing=timing))
    )
    try:
        args = build_parser().parse_args(
            [
                *["check", "--target", url, "--rounds", "1", "--allow-pressure", "--settle", "0.01"],
                *["--min-samples", "5", "--min-bursts", "5", "--concurrency", levels],
                *["--secret-file", str(tmp_path / "s")],
                *["--out", str(tmp_path / "ev"), "--quiet", *extra],
            ]
        )
        out = io.StringIO()
        _, doc = await run_check(args, stdout=out, stderr=io.StringIO())
        doc["_text"] = out.getvalue()
        return doc
    finally:
        await runner.cleanup()


async def test_check_sweep_states_the_crossover_from_the_simulator(tmp_path: Path) -> None:
    # An exaggerated 0.6B-like setup (slow load, expensive prefill) so the flip is far above wall-clock noise.
    timing = {"load_queue_ms": 150.0, "prefill_ms_per_token": 0.02, "jitter_ms": 0.0, "inflight_recompute": 1.0}
    doc = await _sweep(tmp_path, "h200-qwen3-0.6b", 0.5, "1,8", timing)
    sweep = doc["load_sweep"]
    assert [e["concurrency"] for e in sweep] == [1, 8] and all(e["control"] == "recompute" for e in sweep)
    assert all(e["bursts_offload"] >= 5 and e["bursts_control"] >= 5 for e in sweep)
    assert sweep[0]["delta_ttft_seconds"] > 0 > sweep[1]["delta_ttft_seconds"]
    cross = doc["load_sweep_summary"]["crossover"][str(sweep[0]["prefix_tokens"])]
    assert cross["kind"] == "from" and f"pays off from c = {cross['concurrency']}" in doc["_text"]
    assert doc["advice"]["action"] == "skip_loads_below" and doc["advice"]["concurrency"] == 8
    assert doc["_text"].count("advice: ") == 1 and "recommendation:" not in doc["_text"]
    assert sweep[0]["source"] == "rounds" and sweep[0]["n_offload"] == doc["ttft_seconds"]["offload_hit"]["n"]
    png = (tmp_path / "ev" / "ttft.png").read_bytes()
    assert png.startswith(b"\x89PNG") and int.from_bytes(png[20:24], "big") > 300  # the sweep panel's height


async def test_a_length_sweep_finds_the_shortest_prefix_that_pays(tmp_path: Path) -> None:
    # A fixed load overhead of 120 ms against 0.04 ms per recomputed token: loads pay off above ~3,000 tokens.
    timing = {"load_queue_ms": 120.0, "prefill_ms_per_token": 0.04, "jitter_ms": 0.0}
    doc = await _sweep(tmp_path, "h200-qwen3-0.6b", 0.5, "1", timing, "--prefix-tokens", "1024,6144")
    sweep = doc["load_sweep"]
    assert [(e["concurrency"], e["prefix_tokens"]) for e in sweep] == [(1, 1024), (1, 6144)]
    assert doc["conditions"]["sizing"]["prefix_tokens"] == 1024  # the rounds use the first length
    assert sweep[0]["verdict"] == "offload_slower" and sweep[1]["verdict"] == "offload_faster", sweep
    assert doc["load_sweep_summary"]["length_threshold"]["min_prefix_tokens"] == 6144
    assert "prefix length: at c = 1 loads pay off from prefixes of 6,144 tokens" in doc["_text"]


def _recomputed_interval(rows: list[dict[str, Any]], entry: dict[str, Any]) -> tuple[float, float]:
    """An independent recomputation from the evidence folder's raw request records: group the counted
    bursts' requests by cycle, one median per burst, the pairwise differences, and the rank-sum critical
    value counted by enumerating every split of the pooled ranks (not the product's q-binomial table)."""
    import itertools
    import math
    import statistics

    def medians(phase: str, cycles: list[int]) -> list[float]:
        by: dict[int, list[float]] = {c: [] for c in cycles}
        for r in rows:
            if r["phase"] == phase and r["kind"] == "burst" and r["cycle"] in by and r["ttft_seconds"] is not None:
                by[r["cycle"]].append(r["ttft_seconds"])
        assert all(by.values())
        return [statistics.median(by[c]) for c in cycles]

    a = medians("sweep_offload", entry["counted_cycles"]["offload"])
    b = medians("sweep_control", entry["counted_cycles"]["control"])
    n, m = len(a), len(b)
    counts = [0] * (n * m + 1)
    for pos in itertools.combinations(range(n + m), n):
        counts[sum(p - i for i, p in enumerate(pos))] += 1  # U = pairs (a above b) for a at these ranks
    alpha, k, below = 1 - entry["confidence"], 0, 0
    while below + counts[k] <= alpha / 2 * math.comb(n + m, n):
        below += counts[k]
        k += 1
    d = sorted(x - y for x in a for y in b)
    return d[k - 1], d[n * m - k]


async def test_sweep_interval_matches_a_rank_sum_interval_recomputed_from_requests_jsonl(tmp_path: Path) -> None:
    timing = {"jitter_ms": 4.0, "load_queue_ms": 20.0}
    doc = await _sweep(tmp_path, "h200-qwen3-0.6b", 0.2, "4", timing, "--min-bursts", "6")
    (entry,) = [e for e in doc["load_sweep"] if e["concurrency"] == 4]
    assert entry["bursts_offload"] >= 5 and entry["n_offload"] == 4 * entry["bursts_offload"]
    # c = 4 and the rounds as c = 1: two levels, Bonferroni (2.5 % each), spent over the looks 5..6
    look = entry["sequential"]["look"]
    assert entry["confidence"] == pytest.approx(Design.up_to(6, alpha=0.025).confidence_at(look))
    rows = [json.loads(x) for x in (tmp_path / "ev" / "requests.jsonl").read_text().splitlines()]
    low, high = _recomputed_interval(rows, entry)
    assert (entry["ci_low_seconds"], entry["ci_high_seconds"]) == (
        pytest.approx(low, abs=2e-6),
        pytest.approx(high, abs=2e-6),
    )

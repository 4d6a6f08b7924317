"""A tier that never stores, or never loads what it stored, stops `check` after three displaced revisits with
the exporter's own reason, the tier's size, the failures counted and the fix (exit 3, never measure_longer)."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import pytest

from kvoffload_exporter.canary.check.advice import EXIT_CODES, Action
from kvoffload_exporter.canary.check.diagnose import REVISITS, Facts, _action, config_failure
from kvoffload_exporter.canary.cycle.records import CycleRecord
from kvoffload_exporter.canary.types import CycleReason, ProbeResult, Strategy
from kvoffload_exporter.cli import build_parser
from kvoffload_exporter.commands.check import run_check
from kvoffload_exporter.derive.reasons import CanaryFacts
from kvoffload_exporter.sim.server import start
from kvoffload_exporter.sim.simulator import SimOptions, Simulator

TIER_BYTES = 300_000_000  # the H200 run's tier: smaller than one 5,120-token prefix of the 0.6B shape (587 MB)


async def _check(tmp_path: Path, *argv: str, **sim: Any) -> tuple[int, dict[str, Any], str, str]:
    runner, url = await start(Simulator(SimOptions(time_scale=0.1, seed=5, **sim)))
    try:
        fixed = ["--allow-pressure", "--settle", "0.01", "--secret-file", str(tmp_path / "s")]
        args = build_parser().parse_args(["check", "--target", url, *fixed, *argv])
        out, err = io.StringIO(), io.StringIO()
        code, doc = await run_check(args, stdout=out, stderr=err)
        return code, doc, out.getvalue(), err.getvalue()
    finally:
        await runner.cleanup()


async def test_a_tier_smaller_than_the_prefix_stops_after_three_revisits_and_says_grow(tmp_path: Path) -> None:
    code, doc, text, err = await _check(tmp_path, version="0.33.0", engine={"cpu_bytes": TIER_BYTES})
    assert code == 3 and doc["exit_code"] == 3
    assert doc["rounds_completed"] == REVISITS and doc["reasons"] == {"no_store": REVISITS}  # not 10 rounds
    assert doc["verdict"] == "no_offload_hit" and doc["advice"]["action"] == "grow_tier"
    f = doc["configuration_failure"]
    assert (f["seen"], f["state"], f["state_reason"]) == ("not_storing", "not_storing", "stores_dropped")
    assert f["allocation_failures"] >= REVISITS and f["store_bytes"] == 0 and f["load_bytes"] == 0
    assert f["tier_bytes"] < f["prefix_bytes"] == 5120 * 114_688  # the sizes the operator must compare
    why = doc["advice"]["why"]
    for said in ("stores_dropped", "tier 293.6 MB", "5,120-token prefix of 587.2 MB", "allocation failures"):
        assert said in why, said
    assert "grow the CPU tier" in why
    assert "advice: grow_tier" in text and "verdict: no_offload_hit (exit 3)" in text
    assert "measure_longer" not in text + err
    assert "kvoffload-exporter check: stopping after 3 rounds: the tier stored nothing" in err


async def test_stores_that_are_never_loaded_say_check_the_connector(tmp_path: Path) -> None:
    code, doc, text, _ = await _check(tmp_path, faults=("store-without-load",))
    assert code == 3 and doc["rounds_completed"] == REVISITS and doc["reasons"] == {"no_load": REVISITS}
    f = doc["configuration_failure"]
    assert (f["seen"], f["state_reason"]) == ("no_load", "lookup_always_misses") and f["store_bytes"] > 0
    assert doc["advice"]["action"] == "check_connector" and "lookup_always_misses" in doc["advice"]["why"]
    assert "tier size not exported (vLLM < 0.33)" in doc["advice"]["why"]
    assert "advice: check_connector" in text
    # vLLM 0.26 exports no KV size, so the canary's own bytes per token size the prefix: learned from the seed
    # alone, never from the GPU revisit that stores again on a tier whose lookups miss (880.8 MB, 1.5x).
    assert doc["bytes_per_token"] == 114_688 and f["prefix_bytes"] == 5120 * 114_688
    assert "5,120-token prefix of 587.2 MB" in doc["advice"]["why"]


@pytest.mark.parametrize(
    ("backend", "fault", "reason"),
    [("tiering", "promotion-failures", "promotion_failures"), ("mooncake_store", "load-errors", "load_errors")],
)
async def test_a_0_34_tier_that_finds_but_cannot_serve_says_check_the_connector(
    tmp_path: Path, backend: str, fault: str, reason: str
) -> None:
    """vLLM 0.34's failures are configuration failures: stopped early with the exporter's reason (exit 3)."""
    code, doc, text, _ = await _check(tmp_path, version="0.34.0", backend=backend, faults=(fault,))
    assert code == 3 and doc["rounds_completed"] == REVISITS
    f = doc["configuration_failure"]
    assert f["state_reason"] == reason, f
    assert doc["advice"]["action"] == "check_connector" and reason in doc["advice"]["why"]
    assert "advice: check_connector" in text


async def test_a_misconfigured_tier_skips_the_load_sweep(tmp_path: Path) -> None:
    code, doc, _, _ = await _check(tmp_path, "--concurrency", "1,4", faults=("store-without-load",))
    assert code == 3 and doc["advice"]["action"] == "check_connector"
    assert doc["load_sweep"] == [] and not [p for p in doc["phases"] if p["cycle"] > 1000]  # no burst was sent


def _cycles(*reasons: str) -> list[CycleRecord]:
    return [
        CycleRecord(i, Strategy.PRESSURE, 0.0, 0.0, ProbeResult.MISS, CycleReason(r), "")
        for i, r in enumerate(reasons, 1)
    ]


def test_only_revisits_without_store_or_load_on_a_target_that_never_hit_count() -> None:
    kw: dict[str, Any] = {"model": "m", "canary": CanaryFacts(), "prefix_tokens": 5120}
    three = _cycles("no_store", "no_load", "no_store")
    assert config_failure(None, None, cycles=three[:2], hits_seen=0, **kw) is None  # two are not enough
    assert config_failure(None, None, cycles=three, hits_seen=1, **kw) is None  # it did serve a hit once
    others = _cycles("not_displaced", "evicted_from_tier", "no_store", "no_store")
    assert config_failure(None, None, cycles=others, hits_seen=0, **kw) is None
    f = config_failure(None, None, cycles=three, hits_seen=0, **kw)
    assert f is not None and f.seen == "not_storing" and f.revisits == 3
    assert f.action == Action.CHECK_CONNECTOR  # no scrape, no reason: the connector, never a guess at the size


def test_which_reasons_grow_the_tier() -> None:
    for reason in ("tier_smaller_than_prefix", "stores_dropped", "stores_skipped", "tier_smaller_than_gpu_pool"):
        assert _action("not_storing", Facts(reason=reason), None) == Action.GROW_TIER
    for reason in ("lookup_always_misses", "metric_missing", None):
        assert _action("no_load", Facts(reason=reason), None) == Action.CHECK_CONNECTOR
    # No reason counted it, but the tier is smaller than the canary's prefix: the sizes say grow.
    assert _action("not_storing", Facts(tier_bytes=3e8), 5.9e8) == Action.GROW_TIER
    assert EXIT_CODES[Action.GROW_TIER] == EXIT_CODES[Action.CHECK_CONNECTOR] == 3

"""A recorded `check` run re-decided with the product's current method, from its own request records.

Why: the interval method changed (one median per burst, rank-sum interval, simultaneous over the run's
levels); a recorded GPU run keeps its original `report.json`, and this recomputes every level from the
counted bursts (`counted_cycles` + `requests.jsonl`) and the rounds' counted samples (`phases` of the
report), then the run's one advice and exit code, so old and new can be published side by side.

    python tools/gpuref/reanalyse.py RUN_DIR_OR_FIXTURE [--json]
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from clusters import read_jsonl, round_bursts

from kvoffload_exporter.canary.check import sweepreport
from kvoffload_exporter.canary.check.advice import Evidence, advise, exit_code, level_facts
from kvoffload_exporter.canary.check.sweep import SweepRequest


def _rows(folder: Path) -> list[dict[str, Any]]:
    return read_jsonl(folder / "requests.jsonl")


def _bursts(rows: Sequence[Mapping[str, Any]], phase: str, cycles: Sequence[int]) -> list[list[float]]:
    by: dict[int, list[float]] = {c: [] for c in cycles}
    for r in rows:
        if r["phase"] == phase and r["kind"] == "burst" and r["cycle"] in by and r["ttft_seconds"] is not None:
            by[r["cycle"]].append(float(r["ttft_seconds"]))
    return [by[c] for c in cycles]


def levels(doc: Mapping[str, Any], rows: Sequence[Mapping[str, Any]]) -> list[sweepreport.Level]:
    out = []
    for e in doc["load_sweep"]:
        lv = sweepreport.Level(int(e["concurrency"]), int(e["prefix_tokens"]), str(e["control"]), source=e["source"])
        if e["source"] == "rounds":  # the rounds' counted samples, each a burst of one
            rounds = round_bursts(doc["phases"], str(e["control"]))
            lv.offload_bursts, lv.control_bursts = rounds["offload"], rounds["control"]
        else:
            lv.offload_bursts = _bursts(rows, "sweep_offload", e["counted_cycles"]["offload"])
            lv.control_bursts = _bursts(rows, "sweep_control", e["counted_cycles"]["control"])
        lv.attempts, lv.rounds = len(lv.offload_bursts), int(e["rounds"])
        out.append(lv)
    return out


def reanalyse(doc: Mapping[str, Any], rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The run's levels and advice under the current method (no payback note: the measured levels decide)."""
    sweep = doc["load_sweep"]
    req = SweepRequest(tuple(sorted({int(e["concurrency"]) for e in sweep})), (), int(sweep[0]["min_bursts"]))
    entries = [sweepreport.entry(lv, req.min_bursts, confidence=req.per_level_confidence) for lv in levels(doc, rows)]
    prefix = int(doc["conditions"]["sizing"]["prefix_tokens"])
    facts = level_facts(entries, prefix)
    c1 = next(e for e in entries if e["concurrency"] == 1)
    advice = advise(Evidence(verdict=str(c1["verdict"]), verdict_why="c = 1 (the rounds)", levels=facts))
    return {
        "levels": req.family,
        "confidence_per_level": round(req.per_level_confidence, 6),
        "load_sweep": entries,
        "advice": advice.as_dict(),
        "exit_code": exit_code(advice),
    }


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], allow_abbrev=False)
    ap.add_argument("folder", type=Path)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    doc = json.loads((args.folder / "report.json").read_text(encoding="utf-8"))
    new = reanalyse(doc, _rows(args.folder))
    if args.json:
        print(json.dumps(new, indent=2, sort_keys=True))
        return 0
    old = {int(e["concurrency"]): e for e in doc["load_sweep"]}
    for e in new["load_sweep"]:
        o = old[int(e["concurrency"])]
        print(
            f"c={e['concurrency']:>2}  old {o['delta_ttft_seconds'] * 1e3:+7.1f} [{o['ci_low_seconds'] * 1e3:+7.1f}, "
            f"{o['ci_high_seconds'] * 1e3:+7.1f}] {o['verdict']:<15} new {e['delta_ttft_seconds'] * 1e3:+7.1f} "
            f"[{e['ci_low_seconds'] * 1e3:+7.1f}, {e['ci_high_seconds'] * 1e3:+7.1f}] {e['verdict']}"
        )
    print(
        f"advice old {doc['advice']['action']} ({doc['exit_code']}), new {new['advice']['action']} ({new['exit_code']})"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

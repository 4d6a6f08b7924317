"""The load sweep recomputed from the product's own per-request records, beside the product's interval.

    python tools/gpuref/clusters.py EVIDENCE_DIR [--json FILE] [--seed N]

EVIDENCE_DIR is a `check --out` folder (`requests.jsonl`, `report.json`). A burst is the c requests of one
sweep round on one path; requests of one burst share a scheduler step, so the bursts, not the requests,
are the unit: the product's own `cluster_delta` on the bursts read back from `requests.jsonl`. The
point of this module is the independent reading of the records, not a second statistic. A run recorded
before the rank-sum method shows the width ratio of the two methods (its recorded interval is the old one).
"""

from __future__ import annotations

import argparse
import gzip
import json
import sys
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from kvoffload_exporter.canary.cycle.stats import cluster_delta

Bursts = list[list[float]]  # TTFT seconds, one list per burst
PATHS = {"sweep_offload": "offload", "sweep_control": "control"}
ORDINARY = {"offload_hit": "offload"}  # c = 1 from the ordinary rounds: a round is a burst of one


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    """`path`, or `path`.gz where only the compressed copy was kept (recorded fixtures)."""
    if not path.exists() and path.with_name(path.name + ".gz").exists():
        path = path.with_name(path.name + ".gz")
    with gzip.open(path, "rt", encoding="utf-8") if path.suffix == ".gz" else path.open(encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def _has(folder: Path, name: str) -> bool:
    return (folder / name).exists() or (folder / f"{name}.gz").exists()


def _ok(r: Mapping[str, Any]) -> bool:
    return r.get("error") is None and r.get("ttft_seconds") is not None and r.get("counted", True) is not False


def sweep_bursts(requests: Iterable[Mapping[str, Any]]) -> dict[int, dict[str, Bursts]]:
    """{concurrency: {"offload": bursts, "control": bursts}} from the sweep's request records.

    A burst is the records of one round (`cycle`) and one sweep phase; its level is the record's
    `concurrency` where the product writes it, else the burst's size.
    """
    groups: dict[tuple[int, str], list[Mapping[str, Any]]] = defaultdict(list)
    for r in requests:
        if r.get("kind") == "burst" and r.get("phase") in PATHS:
            groups[(int(r["cycle"]), str(r["phase"]))].append(r)
    out: dict[int, dict[str, Bursts]] = defaultdict(lambda: {"offload": [], "control": []})
    for (_, phase), rows in sorted(groups.items()):
        level = int(rows[0].get("concurrency") or len(rows))
        if any(r.get("error") is not None for r in rows):
            continue  # a burst with a failed request fails its round: it is no burst of the level
        ttfts = [float(r["ttft_seconds"]) for r in rows if _ok(r)]
        if ttfts:
            out[level][PATHS[phase]].append(ttfts)
    return dict(out)


def round_bursts(phases: Iterable[Mapping[str, Any]], control_path: str) -> dict[str, Bursts]:
    """The ordinary rounds as bursts of one: counted offload hits against counted controls."""
    out: dict[str, Bursts] = {"offload": [], "control": []}
    for p in phases:
        if not p.get("counted") or p.get("ttft_seconds") is None:
            continue
        side = ORDINARY.get(str(p.get("path"))) or ("control" if p.get("path") == control_path else None)
        if side:
            out[side].append([float(p["ttft_seconds"])])
    return out


def _ms(x: float | None) -> float | None:
    return None if x is None else round(x * 1e3, 3)


def _product_levels(report: Mapping[str, Any]) -> dict[int, Mapping[str, Any]]:
    return {int(e["concurrency"]): e for e in report.get("load_sweep") or [] if "concurrency" in e}


def _product_interval(entry: Mapping[str, Any]) -> tuple[float | None, float | None, float | None]:
    """(delta, low, high) in ms from a `load_sweep` entry."""
    return _ms(entry.get("delta_ttft_seconds")), _ms(entry.get("ci_low_seconds")), _ms(entry.get("ci_high_seconds"))


def level_row(level: int, bursts: Mapping[str, Bursts], product: Mapping[str, Any] | None, seed: int) -> dict[str, Any]:
    """At the product entry's own confidence (simultaneous over the run's levels since the rank-sum method)."""
    confidence = float((product or {}).get("confidence") or 0.95)
    est = cluster_delta(bursts["offload"], bursts["control"], confidence=confidence, seed=seed)
    row: dict[str, Any] = {
        "concurrency": level,
        "harness": {
            "delta_ms": _ms(est.delta),
            "ci95_ms": [_ms(est.low), _ms(est.high)],
            "bursts_offload": est.bursts_offload,
            "bursts_control": est.bursts_control,
            "n_offload": sum(len(b) for b in bursts["offload"]),
            "n_control": sum(len(b) for b in bursts["control"]),
        },
        "product": None,
        "width_ratio": None,
    }
    if product is not None:
        d, lo, hi = _product_interval(product)
        row["product"] = {
            "delta_ms": d,
            "ci95_ms": [lo, hi],
            "verdict": product.get("verdict"),
            **{k: product.get(k) for k in ("bursts_offload", "bursts_control", "n_offload", "n_control")},
        }
        if None not in (lo, hi, est.low, est.high) and est.high != est.low:
            row["width_ratio"] = round((hi - lo) / ((est.high - est.low) * 1e3), 3)  # type: ignore[operator]
    return row


def analyze(evidence: Path, seed: int = 0) -> dict[str, Any]:
    """Every level of the sweep: the harness's cluster interval and the product's, side by side."""
    report = json.loads((evidence / "report.json").read_text(encoding="utf-8"))
    levels = sweep_bursts(read_jsonl(evidence / "requests.jsonl"))
    product = _product_levels(report)
    rounds = 1 in product and (product[1].get("source") == "rounds" or 1 not in levels)
    if rounds and _has(evidence, "phases.jsonl"):  # c = 1 from the ordinary rounds, as the product counts it
        control = str(product[1].get("control") or "control_target")
        levels[1] = round_bursts(read_jsonl(evidence / "phases.jsonl"), control)
    rows = [level_row(c, levels[c], product.get(c), seed) for c in sorted(levels)]
    return {"verdict": report.get("verdict"), "exit_code": report.get("exit_code"), "levels": rows}


def table(result: Mapping[str, Any]) -> str:
    def iv(side: Mapping[str, Any] | None) -> str:
        if not side or side["delta_ms"] is None:
            return "–"
        lo, hi = side["ci95_ms"]
        ci = f" [{lo:+.1f}, {hi:+.1f}]" if lo is not None and hi is not None else " [no interval]"
        return f"{side['delta_ms']:+.1f}{ci}"

    lines = ["c  bursts A/B  product ΔTTFT ms [95 % CI]     harness ΔTTFT ms [95 % CI]     width ratio"]
    for r in result["levels"]:
        h, p = r["harness"], r["product"]
        lines.append(
            f"{r['concurrency']:<3}{h['bursts_offload']:>4}/{h['bursts_control']:<6} {iv(p):<30} {iv(h):<30} "
            f"{r['width_ratio'] if r['width_ratio'] is not None else '–'}"
        )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    p.add_argument("evidence", type=Path, help="a `check --out` folder")
    p.add_argument("--json", type=Path, help="write the comparison here")
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args(argv)
    try:
        result = analyze(a.evidence, a.seed)
    except (OSError, ValueError, KeyError) as e:
        print(f"clusters: cannot read {a.evidence}: {e}", file=sys.stderr)
        return 2
    print(table(result))
    if a.json:
        a.json.write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())

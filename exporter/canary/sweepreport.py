"""The load sweep's statistics, crossover and text (`check --concurrency`); pure.

Why a crossover and not one verdict: the payoff of a CPU-tier hit moves with load and can change sign
either way (the 0.6B shape +24.9 ms at c=1 but −7.1 ms at c=16 on an H200; vllm#44294: loads
serialised under concurrency). The report states where the sign flips and what to do about it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from exporter.canary.stats import bootstrap_delta, median, quantile
from exporter.canary.texttable import ms, table

MIN_CI_SAMPLES = 3  # no interval from fewer samples on either side


@dataclass
class Level:
    """One (concurrency, prefix length) cell of the sweep and what its rounds collected."""

    concurrency: int
    prefix_tokens: int
    control: str  # recompute | control_target | cold
    offload: list[float] = field(default_factory=list)  # TTFT seconds of counted offload revisits
    controls: list[float] = field(default_factory=list)  # TTFT seconds of counted control requests
    rounds: int = 0
    attempts: int = 0  # offload bursts that were displaced (the tier had its chance)
    hit_bursts: int = 0
    left_out: int = 0  # bursts not counted (not displaced, other traffic, control loaded)
    errors: int = 0
    notes: list[str] = field(default_factory=list)


def _r(v: float | None) -> float | None:
    return None if v is None else round(v, 6)


def _verdict(lv: Level, lower: float | None, upper: float | None, min_samples: int) -> str:
    if not lv.offload and lv.attempts >= 3:
        return "no_offload_hit"
    if lower is None or upper is None or min(len(lv.offload), len(lv.controls)) < min_samples:
        return "inconclusive"
    if lower > 0:
        return "offload_slower"
    return "offload_faster" if upper < 0 else "inconclusive"


def entry(lv: Level, min_samples: int, seed: int = 0, n_boot: int = 2000, confidence: float = 0.95) -> dict[str, Any]:
    """One `load_sweep` entry: ΔTTFT = median(offload) − median(control), its bootstrap CI, a verdict."""
    a, b = lv.offload, lv.controls
    delta = lo = hi = None
    if len(a) >= MIN_CI_SAMPLES and len(b) >= MIN_CI_SAMPLES:
        est = bootstrap_delta(a, b, lv.control, seed=seed, n_boot=n_boot, confidence=confidence)
        delta, lo, hi = est.delta, est.lower, est.upper
    elif a and b:
        delta = median(a) - median(b)
    return {
        "concurrency": lv.concurrency,
        "prefix_tokens": lv.prefix_tokens,
        "control": lv.control,
        "n": min(len(a), len(b)),
        "n_offload": len(a),
        "n_control": len(b),
        "delta_ttft_seconds": _r(delta),
        "ci_low_seconds": _r(lo),
        "ci_high_seconds": _r(hi),
        "confidence": confidence,
        "offload_median_seconds": _r(median(a)) if a else None,
        "control_median_seconds": _r(median(b)) if b else None,
        "offload_p90_seconds": _r(quantile(a, 0.9)) if a else None,
        "control_p90_seconds": _r(quantile(b, 0.9)) if b else None,
        "verdict": _verdict(lv, lo, hi, min_samples),
        "rounds": lv.rounds,
        "bursts_left_out": lv.left_out,
        "errors": lv.errors,
        "notes": list(dict.fromkeys(lv.notes)),
    }


def _interpolate(c0: int, d0: float, c1: int, d1: float) -> int:
    """Where the median delta crosses 0, on a log-concurrency axis (levels are usually geometric)."""
    t = d0 / (d0 - d1)
    return max(c0, min(c1, round(math.exp(math.log(c0) + t * (math.log(c1) - math.log(c0))))))


def _levels(cs: Sequence[int]) -> str:
    return ", ".join(str(c) for c in cs)


def crossover(entries: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Where the payoff changes sign over concurrency (entries of one prefix length).

    kind: `from` (slower at low load, pays off from c ≈ N), `up_to` (pays off up to c ≈ N), `always`,
    `never`, or `unclear` (no deltas, or the sign flips more than once). `indicative` is true when a
    level on either side of the flip has an interval that includes 0.
    """
    rows = sorted((e for e in entries if e["delta_ttft_seconds"] is not None), key=lambda e: e["concurrency"])
    cs = [int(e["concurrency"]) for e in rows]
    if not rows:
        return {
            "kind": "unclear",
            "concurrency": None,
            "indicative": True,
            "text": "no level has samples on both paths",
        }
    signs = [1 if e["delta_ttft_seconds"] > 0 else -1 for e in rows]
    flips = [i for i in range(1, len(rows)) if signs[i] != signs[i - 1]]
    decisive = all(e["verdict"] in ("offload_faster", "offload_slower") for e in rows)
    if not flips:
        kind = "always" if signs[0] < 0 else "never"
        verb = "pays off" if kind == "always" else "does not pay off"
        text = f"offload {verb} at every measured level (c = {_levels(cs)})"
        return {"kind": kind, "concurrency": None, "indicative": not decisive, "text": text}
    if len(flips) > 1:
        text = f"no single crossover: the sign of dTTFT changes {len(flips)} times over c = {_levels(cs)}"
        return {"kind": "unclear", "concurrency": None, "indicative": True, "text": text}
    i = flips[0]
    a, b = rows[i - 1], rows[i]
    n = _interpolate(cs[i - 1], a["delta_ttft_seconds"], cs[i], b["delta_ttft_seconds"])
    kind = "from" if signs[0] > 0 else "up_to"
    sure = a["verdict"] in ("offload_faster", "offload_slower") and b["verdict"] in ("offload_faster", "offload_slower")
    text = f"offload pays off {'from' if kind == 'from' else 'up to'} c ≈ {n}"
    if not sure:
        text += (
            f" (indicative: the interval at c = {cs[i - 1] if a['verdict'] == 'inconclusive' else cs[i]} includes 0)"
        )
    return {"kind": kind, "concurrency": n, "indicative": not sure, "text": text}


def recommendation(cross: Mapping[str, Any]) -> str:
    """What an operator does with the crossover (a `max_load_tokens` rule or selective loading)."""
    n, kind = cross.get("concurrency"), cross.get("kind")
    if kind == "from":
        return (
            f"loads cost latency at low load: skip them while fewer than ~{n} requests run (per request "
            f"`kv_transfer_params: {{max_load_tokens: 0}}`, e.g. a router rule) and load above c ≈ {n}; do not "
            "disable the tier on the idle verdict alone"
        )
    if kind == "up_to":
        return (
            f"loads stop paying above c ≈ {n} (concurrent loads of one prefix queue behind each other, "
            f"vllm#44294): load selectively above c ≈ {n}, i.e. send `max_load_tokens: 0` (or a cap below the "
            "prefix length) while more requests are in flight, as llm-d-router #2833 does"
        )
    if kind == "always":
        return "keep loading at every measured load"
    if kind == "never":
        return (
            "loads never paid here: disable loading (`max_load_tokens: 0`) or the tier, or re-measure with "
            "longer prefixes"
        )
    return "re-run with more rounds (`--min-samples`) or more levels before acting"


def length_threshold(entries: Sequence[Mapping[str, Any]]) -> dict[str, Any] | None:
    """Length sweep at the lowest concurrency: the shortest prefix from which loads pay off."""
    if len({e["prefix_tokens"] for e in entries}) < 2:
        return None
    low = min(int(e["concurrency"]) for e in entries)
    rows = sorted((e for e in entries if e["concurrency"] == low), key=lambda e: e["prefix_tokens"])
    pays = [e for e in rows if e["verdict"] == "offload_faster"]
    first = pays[0]["prefix_tokens"] if pays else None
    if first is None:
        return {
            "concurrency": low,
            "min_prefix_tokens": None,
            "text": f"at c = {low} no measured prefix length pays off",
        }
    return {
        "concurrency": low,
        "min_prefix_tokens": first,
        "text": f"at c = {low} loads pay off from prefixes of {first:,} tokens: skip loads for shorter prefixes "
        "(`max_load_tokens: 0` below that length)",
    }


def section(entries: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """`load_sweep_summary`: the crossover per prefix length, its recommendation, the length threshold."""
    by_len: dict[int, list[Mapping[str, Any]]] = {}
    for e in entries:
        by_len.setdefault(int(e["prefix_tokens"]), []).append(e)
    cross = {str(k): crossover(v) for k, v in sorted(by_len.items())}
    first = next(iter(cross.values()), {"kind": "unclear"})
    return {
        "crossover": cross,
        "recommendation": recommendation(first),
        "length_threshold": length_threshold(entries),
    }


def text_lines(entries: Sequence[Mapping[str, Any]], summary: Mapping[str, Any]) -> list[str]:
    """The sweep's table and its conclusion, for the text report."""
    if not entries:
        return []
    heads = ["c", "prefix", "n", "offload ms", "control ms", "dTTFT ms", "95% CI ms", "verdict"]
    rows = []
    for e in entries:
        ci = (
            "-"
            if e["ci_low_seconds"] is None
            else f"[{ms(e['ci_low_seconds'], True)}, {ms(e['ci_high_seconds'], True)}]"
        )
        rows.append(
            [
                str(e["concurrency"]),
                f"{e['prefix_tokens']:,}",
                f"{e['n_offload']}/{e['n_control']}",
                ms(e["offload_median_seconds"]),
                ms(e["control_median_seconds"]),
                ms(e["delta_ttft_seconds"], True),
                ci,
                e["verdict"],
            ]
        )
    out = [
        f"load sweep: bursts of c concurrent revisits of one offloaded prefix vs the same with {entries[0]['control']}"
    ]
    out += table(heads, rows, [i not in (1, 7) for i in range(len(heads))])
    for length, cross in (summary.get("crossover") or {}).items():
        out.append(f"crossover ({int(length):,}-token prefix): {cross['text']}")
    out.append(f"recommendation: {summary.get('recommendation')}")
    if summary.get("length_threshold"):
        out.append(f"prefix length: {summary['length_threshold']['text']}")
    return [*out, ""]


__all__ = [
    "MIN_CI_SAMPLES",
    "Level",
    "crossover",
    "entry",
    "length_threshold",
    "recommendation",
    "section",
    "text_lines",
]

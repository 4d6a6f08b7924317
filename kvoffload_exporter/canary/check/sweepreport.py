"""The load sweep's statistics, crossover and text (`check --concurrency`); pure.

Why a sweep and not one verdict: the payoff of a CPU-tier hit can move with load (vllm#44294: loads of
one prefix serialised under concurrency). Each level is decided from its own burst-level interval; a
crossover is stated only between decided levels, and what to do is left to the run's one advice
(canary/check/advice.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TypedDict

from kvoffload_exporter.canary.check.texttable import ms, table
from kvoffload_exporter.canary.cycle.sequential import Design
from kvoffload_exporter.canary.cycle.stats import METHOD, ClusterDelta, cluster_delta, median, quantile

DECISIVE = ("offload_faster", "offload_slower")


@dataclass
class Level:
    """One (concurrency, prefix length) cell of the sweep and what its bursts collected.

    The burst is the unit: `offload_bursts`/`control_bursts` hold the TTFTs of each counted burst; the
    c = 1 level of the rounds' prefix is the ordinary rounds themselves (`source` "rounds", bursts of one),
    so it and the headline verdict come from the same samples."""

    concurrency: int
    prefix_tokens: int
    control: str  # recompute | control_target | cold
    offload_bursts: list[list[float]] = field(default_factory=list)
    control_bursts: list[list[float]] = field(default_factory=list)
    rounds: int = 0
    attempts: int = 0  # offload bursts that were displaced (the tier had its chance)
    hit_bursts: int = 0
    left_out: int = 0  # bursts not counted (not displaced, other traffic, control loaded)
    errors: int = 0
    notes: list[str] = field(default_factory=list)
    source: str = "sweep"  # sweep | rounds
    offload_cycles: list[int] = field(default_factory=list)  # request records' `cycle` of each counted burst
    control_cycles: list[int] = field(default_factory=list)
    output_compared: int = 0  # offload-hit answers of counted bursts compared with the seed's (recomputed) answer
    output_mismatched: int = 0
    design: Design | None = None  # the sequential design the level stops and is decided with (sequential.py)

    def estimate(self, confidence: float = 0.95, n_boot: int = 0, seed: int = 0) -> tuple[ClusterDelta, int]:
        """The level's interval and the look it is at: with a design, the first n counted bursts of each path
        at look n's confidence (0: before the first look, all bursts at `confidence`, never a verdict)."""
        off, ctl = self.offload_bursts, self.control_bursts
        n = self.design.look(len(off), len(ctl)) if self.design is not None else 0
        if self.design is not None and n:
            off, ctl, confidence = off[:n], ctl[:n], self.design.confidence_at(n)
        return cluster_delta(off, ctl, confidence=confidence, n_boot=n_boot, seed=seed), n

    @property
    def decided(self) -> bool:
        """Its current look decides (a sweep level stops there)."""
        if self.design is None:
            return False
        est, n = self.estimate()
        return bool(n) and _verdict(self, est, self.design.first) in DECISIVE

    @property
    def offload(self) -> list[float]:
        return [x for b in self.offload_bursts for x in b]

    @property
    def controls(self) -> list[float]:
        return [x for b in self.control_bursts for x in b]


class SweepOutput(TypedDict):
    """A level's offload-hit answers compared with the recomputed seed's."""

    compared: int
    mismatched: int
    mismatch_rate: float | None


class CountedCycles(TypedDict):
    offload: list[int]
    control: list[int]


class SweepEntry(TypedDict):
    """One `load_sweep` entry of the check document (`entry`)."""

    concurrency: int
    prefix_tokens: int
    control: str
    source: str
    n: int
    n_offload: int
    n_control: int
    bursts_offload: int
    bursts_control: int
    min_bursts: int
    delta_ttft_seconds: float | None
    ci_low_seconds: float | None
    ci_high_seconds: float | None
    delta_p90_seconds: float | None
    ci_p90_low_seconds: float | None
    ci_p90_high_seconds: float | None
    confidence: float
    p_value: float | None
    interval_method: str
    sequential: dict[str, object] | None  # the level's sequential design and the look it stopped at
    offload_median_seconds: float | None
    control_median_seconds: float | None
    offload_p90_seconds: float | None
    control_p90_seconds: float | None
    verdict: str
    rounds: int
    bursts_left_out: int
    counted_cycles: CountedCycles
    errors: int
    notes: list[str]
    output: SweepOutput


class Crossover(TypedDict, total=False):
    """Where the payoff changes sign over concurrency, for one prefix length (`crossover`)."""

    concurrency: int | None
    indicative: bool
    kind: str
    text: str


class LengthThreshold(TypedDict):
    """The shortest prefix from which loads decidedly pay off, at the lowest concurrency."""

    concurrency: int
    min_prefix_tokens: int | None
    text: str


class SweepSummary(TypedDict):
    """`load_sweep_summary` of the check document (`section`)."""

    crossover: dict[str, Crossover]
    length_threshold: LengthThreshold | None


def _r(v: float | None) -> float | None:
    return None if v is None else round(v, 6)


def _verdict(lv: Level, est: ClusterDelta, min_bursts: int) -> str:
    if not lv.offload_bursts and lv.attempts >= 3:
        return "no_offload_hit"
    if min(est.bursts_offload, est.bursts_control) < min_bursts or not est.has_interval:
        return "inconclusive"
    assert est.low is not None and est.high is not None
    if est.low > 0:
        return "offload_slower"
    return "offload_faster" if est.high < 0 else "inconclusive"


def entry(lv: Level, min_bursts: int, seed: int = 0, n_boot: int = 2000, confidence: float = 0.95) -> SweepEntry:
    """One `load_sweep` entry: ΔTTFT = the Hodges–Lehmann shift of the burst medians with its exact rank-sum
    interval (canary/cycle/shift.py), Δp90 with a descriptive burst bootstrap; no interval under `min_bursts`
    bursts a path."""
    est, look = lv.estimate(confidence, n_boot, seed)
    if lv.design is not None:  # sequential: the interval and verdict of the level's look (sequential.py)
        min_bursts, confidence = lv.design.first, est.confidence
    enough = min(est.bursts_offload, est.bursts_control) >= min_bursts
    notes = list(lv.notes)
    if not enough and lv.offload_bursts:
        notes.append(
            f"{est.bursts_offload}/{est.bursts_control} bursts (offload/control) < "
            f"{'the first look ' if lv.design is not None else '--min-bursts '}{min_bursts}: no interval, no verdict"
        )
    a, b = lv.offload, lv.controls
    return {
        "concurrency": lv.concurrency,
        "prefix_tokens": lv.prefix_tokens,
        "control": lv.control,
        "source": lv.source,
        "n": min(len(a), len(b)),
        "n_offload": len(a),
        "n_control": len(b),
        "bursts_offload": est.bursts_offload,
        "bursts_control": est.bursts_control,
        "min_bursts": min_bursts,
        "delta_ttft_seconds": _r(est.delta),
        "ci_low_seconds": _r(est.low) if enough else None,
        "ci_high_seconds": _r(est.high) if enough else None,
        "delta_p90_seconds": _r(est.p90_delta),
        "ci_p90_low_seconds": _r(est.p90_low) if enough else None,
        "ci_p90_high_seconds": _r(est.p90_high) if enough else None,
        "confidence": confidence,
        "p_value": _r(est.p_value) if enough else None,
        "interval_method": METHOD,
        "sequential": {**lv.design.describe(), "look": look} if lv.design is not None else None,
        "offload_median_seconds": _r(median(a)) if a else None,
        "control_median_seconds": _r(median(b)) if b else None,
        "offload_p90_seconds": _r(quantile(a, 0.9)) if a else None,
        "control_p90_seconds": _r(quantile(b, 0.9)) if b else None,
        "verdict": _verdict(lv, est, min_bursts),
        "rounds": lv.rounds,
        "bursts_left_out": lv.left_out,
        "counted_cycles": {"offload": list(lv.offload_cycles), "control": list(lv.control_cycles)},
        "errors": lv.errors,
        "notes": list(dict.fromkeys(notes)),
        "output": {
            "compared": lv.output_compared,
            "mismatched": lv.output_mismatched,
            "mismatch_rate": _r(lv.output_mismatched / lv.output_compared) if lv.output_compared else None,
        },
    }


def _levels(cs: Sequence[int]) -> str:
    return ", ".join(str(c) for c in cs)


def crossover(entries: Sequence[SweepEntry]) -> Crossover:
    """Where the payoff changes sign over concurrency (entries of one prefix length), from decided levels only.

    A level counts only when its interval excludes 0 (verdict offload_faster/offload_slower); point estimates
    of undecided levels never make a crossover. kind: `from` (decidedly slower at low load, decidedly faster
    from c = N), `up_to` (faster up to c = N, decidedly slower above), `always` / `never` (every level decided,
    one sign), `partial` (decided levels share one sign, others undecided), `undecided` (no level decided) or
    `unclear` (the decided sign flips more than once). `indicative` is true when any level is undecided."""
    rows = sorted(entries, key=lambda e: int(e["concurrency"]))
    cs = [int(e["concurrency"]) for e in rows]
    dec = [e for e in rows if e["verdict"] in DECISIVE]
    open_ = [int(e["concurrency"]) for e in rows if e["verdict"] not in DECISIVE]
    undecided = f"; undecided at c = {_levels(open_)} (interval includes 0 or too few bursts)" if open_ else ""
    out: Crossover = {"concurrency": None, "indicative": bool(open_)}
    if not dec:
        text = f"no level decided (c = {_levels(cs)}): every interval includes 0 or has too few bursts"
        return {**out, "kind": "undecided" if rows else "unclear", "text": text if rows else "no level measured"}
    faster = [int(e["concurrency"]) for e in dec if e["verdict"] == "offload_faster"]
    slower = [int(e["concurrency"]) for e in dec if e["verdict"] == "offload_slower"]
    signs = [e["verdict"] == "offload_faster" for e in dec]
    flips = sum(1 for i in range(1, len(signs)) if signs[i] != signs[i - 1])
    if flips == 0:
        verb = "pays off" if faster else "is slower than the control"
        kind = ("always" if faster else "never") if not open_ else "partial"
        at = "at every measured level" if not open_ else "at c = " + _levels(faster or slower)
        return {**out, "kind": kind, "text": f"offload {verb} {at}{undecided}"}
    if flips > 1:
        text = f"no single crossover: decided levels change sign {flips} times (faster at c = {_levels(faster)}, "
        return {**out, "kind": "unclear", "text": text + f"slower at c = {_levels(slower)}){undecided}"}
    if not signs[0]:  # slower first, then faster
        text = f"offload is slower at c = {_levels(slower)} and pays off from c = {faster[0]}{undecided}"
        return {**out, "kind": "from", "concurrency": faster[0], "text": text}
    text = f"offload pays off up to c = {faster[-1]} and is slower at c = {_levels(slower)}{undecided}"
    return {**out, "kind": "up_to", "concurrency": faster[-1], "text": text}


def length_threshold(entries: Sequence[SweepEntry]) -> LengthThreshold | None:
    """Length sweep at the lowest concurrency: the shortest prefix from which loads decidedly pay off (a
    finding; what to do is the run's one `advice`)."""
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
    shorter = [f"{e['prefix_tokens']:,} ({e['verdict']})" for e in rows if e["prefix_tokens"] < first]
    return {
        "concurrency": low,
        "min_prefix_tokens": first,
        "text": f"at c = {low} loads pay off from prefixes of {first:,} tokens"
        + (f"; shorter: {', '.join(shorter)}" if shorter else ""),
    }


def section(entries: Sequence[SweepEntry]) -> SweepSummary:
    """`load_sweep_summary`: the crossover per prefix length and the length threshold (findings, no advice)."""
    by_len: dict[int, list[SweepEntry]] = {}
    for e in entries:
        by_len.setdefault(int(e["prefix_tokens"]), []).append(e)
    return {
        "crossover": {str(k): crossover(v) for k, v in sorted(by_len.items())},
        "length_threshold": length_threshold(entries),
    }


def _ci(lo: float | None, hi: float | None) -> str:
    return "-" if lo is None or hi is None else f"[{ms(lo, True)}, {ms(hi, True)}]"


def percent(confidence: float) -> str:
    """A confidence as the report prints it: 95, 97.5, 98.75 (never rounded to a level it is not)."""
    return f"{float(confidence) * 100:.4g}"


def text_lines(entries: Sequence[SweepEntry], summary: SweepSummary | None) -> list[str]:
    """The sweep's table and its findings, for the text report (the advice line is printed once, by report)."""
    if not entries:
        return []
    confs = sorted({float(e["confidence"]) for e in entries})  # sequential: each level's look confidence
    pct = percent(confs[0]) if len(confs) == 1 else f"{percent(confs[0])}-{percent(confs[-1])}"
    heads = ["c", "prefix", "bursts", "n", "offload ms", "control ms", "dTTFT ms", f"{pct}% CI ms", "dp90 ms"]
    heads += [f"{pct}% CI ms", "verdict"]
    rows = []
    for e in entries:
        rows.append(
            [
                str(e["concurrency"]) + ("*" if e.get("source") == "rounds" else ""),
                f"{e['prefix_tokens']:,}",
                f"{e.get('bursts_offload', '?')}/{e.get('bursts_control', '?')}",
                f"{e['n_offload']}/{e['n_control']}",
                ms(e["offload_median_seconds"]),
                ms(e["control_median_seconds"]),
                ms(e["delta_ttft_seconds"], True),
                _ci(e["ci_low_seconds"], e["ci_high_seconds"]),
                ms(e.get("delta_p90_seconds"), True),
                _ci(e.get("ci_p90_low_seconds"), e.get("ci_p90_high_seconds")),
                e["verdict"],
            ]
        )
    out = [
        "load sweep: bursts of c concurrent revisits of one offloaded prefix vs the same with "
        f"{entries[0]['control']}; dTTFT: Hodges-Lehmann shift of the burst medians, exact rank-sum interval "
        f"(min {entries[0].get('min_bursts', '?')} bursts a path); dp90: bursts resampled, descriptive only"
    ]
    out += table(heads, rows, [i not in (1, len(heads) - 1) for i in range(len(heads))])
    compared = [e for e in entries if e.get("output", {}).get("compared")]
    if compared:
        out.append(
            "load sweep answers (offload hits vs the recomputed seed): "
            + ", ".join(
                f"c={e['concurrency']} {e['output']['mismatched']}/{e['output']['compared']} differ" for e in compared
            )
        )
    if any(e.get("source") == "rounds" for e in entries):
        out.append("* the ordinary rounds (each a burst of one): the same samples as the headline verdict")
    if summary:
        for length, cross in summary["crossover"].items():
            out.append(f"crossover ({int(length):,}-token prefix): {cross['text']}")
        if threshold := summary.get("length_threshold"):
            out.append(f"prefix length: {threshold['text']}")
    return [*out, ""]


__all__ = [
    "DECISIVE",
    "Crossover",
    "LengthThreshold",
    "Level",
    "SweepEntry",
    "SweepSummary",
    "crossover",
    "entry",
    "length_threshold",
    "percent",
    "section",
    "text_lines",
]

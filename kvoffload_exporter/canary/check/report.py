"""The `check` report: JSON document, verdict table as text, and the exit code; pure.

The exit code is the advice's (canary/check/advice.py EXIT_CODES; checkreport sets it): `build` gives the
verdict's own code only until the advice is known, and 3 for a run that could not measure.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import asdict
from typing import Any

from kvoffload_exporter.canary.check import sweepreport
from kvoffload_exporter.canary.check.document import CheckDocument, CycleRow, DeltaEntry, PathSummary, PhaseSummary
from kvoffload_exporter.canary.check.texttable import ms, table
from kvoffload_exporter.canary.cycle.outputcheck import output_line
from kvoffload_exporter.canary.cycle.plan import SizingDoc
from kvoffload_exporter.canary.cycle.records import ConditionsDoc, CycleRecord, PhaseRecord, ServerDoc
from kvoffload_exporter.canary.cycle.stats import Summary, Verdict, median, summarize
from kvoffload_exporter.catalogue import CANARY_PATHS
from kvoffload_exporter.derive.payback import CheckRecommendation
from kvoffload_exporter.derive.reasons import HINTS
from kvoffload_exporter.enums import StateReason

EXIT_CODES = {
    "offload_faster": 0,
    "offload_slower": 1,
    "no_offload_hit": 4,
    "inconclusive": 4,
    "error": 3,
    "output_mismatch": 5,
}
PHASES = (
    "seed",
    "gpu_revisit",
    "seed_b",
    "displace",
    "offload_revisit",
    "wait_revisit",
    "recompute",
    "cold",
    "control_target",
)


def _r(v: float | None, nd: int = 6) -> float | None:
    return None if v is None else round(v, nd)


def _summary(s: Summary | None) -> PathSummary | None:
    if s is None:
        return None
    return {"n": s.n, "median": _r(s.median), "p25": _r(s.p25), "p75": _r(s.p75), "min": _r(s.min), "max": _r(s.max)}


_MEDIANS = ("load_bytes", "store_bytes", "gpu_hit_tokens", "external_hit_tokens", "cached_tokens", "ttft_seconds")


def _medians(rows: Sequence[PhaseRecord]) -> dict[str, float | None]:
    """Per field of `_MEDIANS`: the median over the rows that have it."""
    out: dict[str, float | None] = {}
    for key in _MEDIANS:
        xs = [float(v) for p in rows if (v := getattr(p, key)) is not None]
        out[key] = median(xs) if xs else None
    return out


def phase_summary(phases: Sequence[PhaseRecord]) -> list[PhaseSummary]:
    """Per phase over all cycles: classifications counted, medians of the counter deltas."""
    out: list[PhaseSummary] = []
    for name in PHASES:
        rows = [p for p in phases if p.phase == name]
        if not rows:
            continue
        cls = Counter(str(p.classification) for p in rows if p.classification is not None)
        med = _medians(rows)
        out.append(
            {
                "phase": name,
                "n": len(rows),
                "classifications": dict(sorted(cls.items())),
                "load_bytes": med["load_bytes"],
                "store_bytes": med["store_bytes"],
                "gpu_hit_tokens": med["gpu_hit_tokens"],
                "external_hit_tokens": med["external_hit_tokens"],
                "cached_tokens": med["cached_tokens"],
                "ttft_seconds": _r(med["ttft_seconds"]),
            }
        )
    return out


def _deltas(verdict: Verdict | None) -> dict[str, DeltaEntry]:
    return {
        k: {
            "delta_seconds": round(e.delta, 6),
            "ci_seconds": [round(e.lower, 6), round(e.upper, 6)],
            "confidence": e.confidence,
            "n_offload": e.n_offload,
            "n_control": e.n_control,
        }
        for k, e in (verdict.estimates.items() if verdict else ())
    }


def _cycle_row(c: CycleRecord) -> CycleRow:
    return {
        "cycle": c.cycle,
        "strategy": c.strategy,
        "result": c.result,
        "reason": c.reason,
        "detail": c.detail,
        "order": c.order,
    }


def _phase_row(p: PhaseRecord) -> dict[str, object]:
    return {k: (_r(v) if isinstance(v, float) else v) for k, v in asdict(p).items()}


def build(
    verdict: Verdict | None,
    samples: Mapping[str, Sequence[float]],
    first_event: Mapping[str, Sequence[float]],
    phases: Sequence[PhaseRecord],
    cycles: Sequence[CycleRecord],
    conditions: ConditionsDoc | None,
    error: str | None = None,
) -> CheckDocument:
    """The `--json` document's measurement part; checkreport.document adds the run's facts and the advice."""
    v = "error" if error else (verdict.verdict if verdict else "inconclusive")
    est = verdict.primary if verdict and not error else None
    return {
        "verdict": v,
        "exit_code": EXIT_CODES[v],
        "why": error or (verdict.why if verdict else "no cycles ran"),
        "control": verdict.control if verdict and not error else None,
        "delta_ttft_seconds": _r(est.delta) if est else None,
        "delta_ttft_ci_seconds": [_r(est.lower), _r(est.upper)] if est else None,
        "deltas": _deltas(verdict),
        "ttft_seconds": {p: _summary(summarize(list(samples.get(p, ())))) for p in CANARY_PATHS},
        "ttft_first_event_seconds": {p: _summary(summarize(list(first_event.get(p, ())))) for p in CANARY_PATHS},
        "reasons": dict(Counter(str(c.reason) for c in cycles)),
        "cycles": [_cycle_row(c) for c in cycles],
        "phase_summary": phase_summary(phases),
        "phases": [_phase_row(p) for p in phases],
        "conditions": conditions,
    }


def _mb(v: float | None) -> str:
    return "-" if v is None else f"{v / 1e6:,.1f}"


def _tok(v: float | None) -> str:
    return "-" if v is None else f"{v:,.0f}"


# Any: an interval document of derive/intervalreport (a key per Signal)
def _state_lines(interval: Mapping[str, Any] | None) -> list[str]:
    """The exporter's evidence state per engine over the run, and why (derive.reasons) when the state needs
    explaining, as `inspect BEFORE AFTER` prints it."""
    out = []
    for e in (interval or {}).get("engines") or ():
        line = f"engine {e.get('model_name')}/{e.get('engine')} over the run: {e.get('state')}"
        reason = e.get("state_reason")
        if reason:
            line += f", why: {reason} - {HINTS.get(StateReason(reason), '')}"
        out.append(line)
    return out


def _payback_lines(rec: CheckRecommendation | None) -> list[str]:
    """The payback model's figure as evidence: it names no action (the one advice line does)."""
    if not rec:
        return []
    pb = rec["payback_seconds_per_gib_hour"]
    figure = "tier size unknown" if pb is None else f"{pb:+.3g} s per GiB-hour"
    return [
        f"tier payback model over this run: {figure}, saved {rec['saved_seconds'] * 1000:+.1f} ms "
        f"(prefill {rec['prefill_seconds_per_token'] * 1e6:.3g} us/token, from {rec['prefill_cost_from']}); "
        "a model, weighed in the advice below",
        "",
    ]


def _closing_lines(doc: CheckDocument) -> list[str]:
    """Stalled requests, hints and the one advice line."""
    out = [
        f"stalled: round {st['cycle']} {st['phase']} waited {st['queue_seconds'] * 1000:.0f} ms in the server's "
        f"queue (peers' median {st['peers_median_queue_seconds'] * 1000:.0f} ms): its TTFT measures the queue"
        for st in doc.get("stalled_requests") or ()
    ]
    out += [f"hint: {h}" for h in doc.get("hints") or []]
    advice = doc.get("advice")
    if advice:
        at = f" (c = {advice['concurrency']})" if advice.get("concurrency") is not None else ""
        out.append(f"advice: {advice['action']}{at} - {advice['why']}")
    return out


def _condition_lines(doc: CheckDocument) -> list[str]:
    """The target, the prompt's sizing, the control target and the recompute control."""
    cond: ConditionsDoc = doc.get("conditions") or {}
    t: ServerDoc = cond.get("target") or {}
    sz: SizingDoc = cond.get("sizing") or {}
    out = [
        f"kvoffload-exporter check: {t.get('url', '?')}  vLLM {t.get('version') or '?'}  "
        f"model {t.get('model', '?')}  offload metrics: {t.get('generation', '?')}"
    ]
    if sz:
        cache = cond.get("gpu_cache_tokens")
        out.append(
            f"GPU cache {_tok(cache)} tokens (block {sz.get('block_size')}), prompt {sz.get('prefix_tokens')} "
            f"prefix + {sz.get('tail_tokens')} tail tokens, aligned to {sz.get('align')} "
            f"({'offload chunk' if sz.get('chunk_known') else 'chunk unknown, 256-aligned'}); strategy "
            f"{cond.get('strategy')}"
            + (
                f", {sz.get('filler_count')} fillers x {sz.get('filler_tokens')} tokens"
                if cond.get("strategy") == "pressure"
                else ""
            )
        )
    ctl = cond.get("control")
    if ctl:
        out.append(
            f"control target: {ctl.get('url')}  vLLM {ctl.get('version') or '?'}  offload metrics: "
            f"{ctl.get('generation')}"
        )
    rc = doc.get("recompute_control")
    if rc:
        out.append(
            f"recompute control (max_load_tokens 0): {rc}"
            + ("  - the server loaded anyway, so this control is unavailable" if rc == "ignored" else "")
        )
    return [*out, ""]


def _ttft_lines(doc: CheckDocument) -> list[str]:
    """TTFT per canary path: client-measured quantiles and the first event's median."""
    rows = []
    for p in CANARY_PATHS:
        s = (doc.get("ttft_seconds") or {}).get(p)
        f = (doc.get("ttft_first_event_seconds") or {}).get(p)
        rows.append(
            [
                p,
                str(s["n"]) if s else "0",
                ms(s and s["median"]),
                ms(s and s["p25"]),
                ms(s and s["p75"]),
                ms(f and f["median"]),
            ]
        )
    heads = ["TTFT path", "n", "median ms", "p25 ms", "p75 ms", "1st event ms"]
    return [*table(heads, rows, [False, True, True, True, True, True]), ""]


def _delta_lines(doc: CheckDocument) -> list[str]:
    """ΔTTFT against each control with its rank-sum interval; the verdict's control marked."""
    deltas = doc.get("deltas") or {}
    if not deltas:
        return []
    rows = []
    for k, d in deltas.items():
        lo, hi = d["ci_seconds"]
        mark = "  <- verdict" if k == doc.get("control") else ""
        rows.append(
            [
                k,
                f"{d['delta_seconds'] * 1000:+.1f}",
                f"[{lo * 1000:+.1f}, {hi * 1000:+.1f}]",
                f"{d['n_offload']}/{d['n_control']}" + mark,
            ]
        )
    pct = sweepreport.percent(next(iter(deltas.values()))["confidence"])
    heads = ["dTTFT offload_hit - control", "HL shift ms", f"{pct}% rank-sum CI ms", "n"]
    return [*table(heads, rows, [False, True, True, False]), ""]


def _phase_lines(doc: CheckDocument) -> list[str]:
    """Per-phase medians of the counter deltas around each probe."""
    rows = []
    for ph in doc.get("phase_summary") or []:
        cls = ", ".join(f"{k} x{v}" for k, v in ph["classifications"].items()) or "-"
        rows.append(
            [
                ph["phase"],
                str(ph["n"]),
                cls,
                _mb(ph["load_bytes"]),
                _mb(ph["store_bytes"]),
                _tok(ph["external_hit_tokens"]),
                _tok(ph["gpu_hit_tokens"]),
                _tok(ph["cached_tokens"]),
            ]
        )
    if not rows:
        return []
    heads = ["phase", "n", "classification", "load MB", "store MB", "ext hit tok", "GPU hit tok", "cached tok"]
    return [
        *table(heads, rows, [False, True, False, True, True, True, True, True]),
        "(per-phase medians of the counter deltas around each probe, flush request included)",
        "",
    ]


def _run_lines(doc: CheckDocument) -> list[str]:
    """What the rounds ended in, the tokens spent, the sweep, the exporter's state and the output check."""
    out = []
    reasons = doc.get("reasons") or {}
    if reasons:
        out.append("cycles: " + ", ".join(f"{k} x{v}" for k, v in sorted(reasons.items(), key=lambda kv: -kv[1])))
    if doc.get("tokens_spent") is not None:
        out.append(f"canary tokens spent: {doc['tokens_spent']:,}")
    out += sweepreport.text_lines(doc.get("load_sweep") or [], doc.get("load_sweep_summary"))
    out += _state_lines(doc.get("interval"))
    if output := doc.get("output_check"):
        out.append(output_line(output))
    return out


def text(doc: CheckDocument) -> str:
    """The human verdict table printed by `check`: one renderer per section, in the order printed."""
    out = [
        *_condition_lines(doc),
        *_ttft_lines(doc),
        *_delta_lines(doc),
        *_payback_lines(doc.get("recommendation")),
        *_phase_lines(doc),
        *_run_lines(doc),
        *_closing_lines(doc),
        f"verdict: {doc['verdict']} (exit {doc['exit_code']}) - {doc['why']}",
    ]
    return "\n".join(out) + "\n"

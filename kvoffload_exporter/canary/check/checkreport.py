"""`check`'s verdict document from a CheckResult (report.build does the statistics and the text)."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence

from kvoffload_exporter.canary.check import report, sweepreport
from kvoffload_exporter.canary.check.advice import Action, Advice, Evidence, LevelFact, advise, exit_code, level_facts
from kvoffload_exporter.canary.check.checkrun import CheckResult
from kvoffload_exporter.canary.check.document import CheckDocument
from kvoffload_exporter.canary.check.progress import redact
from kvoffload_exporter.canary.check.stalls import stalled
from kvoffload_exporter.canary.cycle.records import PhaseRecord
from kvoffload_exporter.derive.intervalreport import report as interval_report
from kvoffload_exporter.derive.payback import check_recommendation
from kvoffload_exporter.enums import OutputResult, VerdictKind
from kvoffload_exporter.ingest.exposition import ParseError
from kvoffload_exporter.ingest.normalise import normalise


def error_document(why: str, action: Action = Action.FIX_TARGET) -> CheckDocument:
    """The document when not even the procedure could start (bad flags, keys or secret) or check itself
    failed; its advice names what to fix, and the exit code follows it."""
    advice = advise(Evidence("error", why, error=redact(why), error_action=action))
    return {"verdict": "error", "exit_code": exit_code(advice), "why": redact(why), "advice": advice.as_dict()}


def _first_event(phases: Sequence[PhaseRecord]) -> dict[str, list[float]]:
    """Counted probes' TTFT to the first event, by path."""
    out: dict[str, list[float]] = {}
    for p in phases:
        if p.counted and p.ttft_first_event_seconds is not None:
            out.setdefault(p.path, []).append(p.ttft_first_event_seconds)
    return out


def _interval(result: CheckResult) -> dict[str, object] | None:  # inspect's document: a key per Signal
    """The target's counters between the first and the closing scrape (evidence only)."""
    before, after = result.engine.first_snapshot.get("target"), result.after.get("target")
    if before is None or after is None:
        return None
    try:
        return interval_report(normalise(before), normalise(after))
    except ParseError:
        return None


def _left_out(phases: Sequence[Mapping[str, object]]) -> dict[str, int]:
    """Displaced revisits that did not enter the offload statistics, by why (`phases` rows of the document)."""
    out = {"ambiguous": 0, "not_displaced": 0, "no_hit": 0}
    for p in phases:
        if p["phase"] not in ("offload_revisit", "wait_revisit") or p["counted"]:
            continue
        if p["ambiguous"]:
            out["ambiguous"] += 1
        elif p["classification"] == "gpu_hit":
            out["not_displaced"] += 1
        else:
            out["no_hit"] += 1
    return out


def _short(doc: CheckDocument, min_samples: int, rounds: int) -> list[str]:
    """Too few offload-hit samples: say how many were left out and why, and what to change."""
    ttft = doc.get("ttft_seconds") or {}
    hit = ttft.get("offload_hit")
    n = hit["n"] if hit else 0
    lost = _left_out(doc.get("phases", []))
    parts = [f"{v} {k.replace('_', ' ')}" for k, v in lost.items() if v]
    if parts:
        doc["why"] += " (revisits left out: " + ", ".join(parts)
        doc["why"] += "; ambiguous = other traffic could explain the hit)" if lost["ambiguous"] else ")"
    per_round = n / rounds if rounds and n else 0.0
    need = math.ceil(rounds * min_samples / n) if per_round else None
    hints = [f"--rounds {need} (about {per_round:.1f} counted samples per round so far)"] if need else []
    cond = doc.get("conditions")
    if cond and cond.get("strategy") == "wait":
        hints.append("--allow-pressure (staging: fillers displace the prefix, no other traffic needed)")
    ctl = [p for p in ("recompute", "control_target", "cold") if (s := ttft.get(p)) and s["n"]]
    if not (cond and cond.get("control")) and not ctl:
        hints.append("--control-target URL (the same model without the connector) for a control path")
    return hints


def _explain(doc: CheckDocument, result: CheckResult) -> None:
    """Never an answer without evidence: say why a verdict is missing and what would get one."""
    reasons = {k: v for k, v in doc.get("reasons", {}).items() if k != "error"}
    s = result.request.settings
    hints: list[str] = []
    if doc["verdict"] == "inconclusive" and reasons and set(reasons) == {"not_displaced"}:
        doc["why"] = (
            f"nothing displaced the prefix from the GPU in {reasons['not_displaced']} rounds, so the tier was never "
            "needed: this says nothing about offloading"
        )
        hints.append("--allow-pressure (staging) or run while real traffic fills the GPU cache")
    elif doc["verdict"] == "inconclusive" and result.engine.state.verdict and result.engine.state.verdict.short:
        hints += _short(doc, s.min_samples, doc.get("rounds_completed", 0))
    doc["hints"] = hints


def _sweep(doc: CheckDocument, result: CheckResult) -> None:
    s, req = result.request.settings, result.request.sweep
    need = req.min_bursts if req is not None else 0
    entries = [sweepreport.entry(lv, need, s.seed, s.bootstrap, s.confidence) for lv in result.sweep]
    doc["load_sweep"] = entries if req is not None else None
    doc["load_sweep_summary"] = sweepreport.section(entries) if entries else None
    doc["decision"] = {
        "levels": req.family if req is not None else 1,
        "confidence": req.family_confidence if req is not None else s.confidence,
        "confidence_per_level": round(s.confidence, 6),
        "correction": "bonferroni" if req is not None and req.family > 1 else "none",
        "exit_code_from": "advice",
    }


def _advice(doc: CheckDocument, result: CheckResult) -> Advice:
    """The one advice, from the typed verdict, the sweep rows at the rounds' prefix, payback and state."""
    run = result.engine.prepared
    prefix = run.sizing.prefix_tokens if run is not None else None
    levels = level_facts(doc.get("load_sweep") or [], prefix)
    if levels and all(lv.concurrency != 1 for lv in levels):  # the rounds are the c = 1 measurement
        levels = (LevelFact(1, doc["verdict"], doc.get("delta_ttft_seconds")), *levels)
    rec = doc.get("recommendation")
    engines = (doc.get("interval") or {}).get("engines") or ()
    return advise(
        Evidence(
            verdict=doc["verdict"],
            verdict_why=doc["why"],
            levels=levels,
            payback_action=rec["action"] if rec else None,
            payback_why=rec["why"] if rec else None,
            state_reasons=tuple(str(e["state_reason"]) for e in engines if e.get("state_reason")),
            error=result.error,
            error_action=result.error_action,
            config_failure=_config_failure(result),
        )
    )


def _config_failure(result: CheckResult) -> Advice | None:
    """The fix for a tier the rounds stopped on (canary/check/diagnose.py), as the run's advice."""
    f = result.config_failure
    return Advice(f.action, None, redact(f.why)) if f is not None else None


def output_precedence(doc: CheckDocument, advice: Advice) -> Advice:
    """Applied after the speed decision: an offload hit that answered other tokens than the same prompt
    served from the GPU or recomputed makes the verdict `output_mismatch` and the advice `disable_offload`,
    whatever the speed says (the speed verdict stays in `speed_verdict`). Unverifiable is never a mismatch."""
    out = doc.get("output_check")
    if not out or out["result"] != OutputResult.MISMATCH:
        return advice
    bad = [p for p in out["pairs"] if p["result"] == OutputResult.MISMATCH]
    first = (
        f"{bad[0]['cycle']} ({bad[0]['pair']}): offload hit {bad[0]['offload_token_ids']} vs "
        f"{bad[0]['reference_token_ids']}"
        if bad
        else "None (None): offload hit None vs None"
    )
    evidence = f"{out['mismatched']} of {out['compared']} comparisons answered other tokens; first in round {first}"
    doc["speed_verdict"], doc["speed_why"] = doc["verdict"], doc["why"]
    doc["verdict"], doc["why"] = VerdictKind.OUTPUT_MISMATCH.value, evidence
    return Advice(
        Action.DISABLE_OFFLOAD,
        None,
        f"requests served from the tier got other answers than the same prompt without it ({evidence}): "
        "disable offloading until the connector is fixed",
    )


def _run_facts(doc: CheckDocument, result: CheckResult) -> None:
    """What the run spent and learnt, after the measurements."""
    engine, state = result.engine, result.engine.state
    doc["recompute_control"] = state.recompute_control
    doc["bytes_per_token"] = state.bytes_per_token
    doc["tokens_spent"] = state.tokens_spent
    doc["offload_attempts"] = state.offload_attempts
    doc["residency_seconds"] = dict(state.residency)
    doc["rounds_requested"] = result.request.rounds
    doc["rounds_completed"] = sum(1 for c in engine.cycles if c.reason != "error")
    doc["rounds_failed"] = sum(1 for c in engine.cycles if c.reason == "error")
    doc["duration_seconds"] = round(result.finished - result.started, 3)
    doc["interval"] = _interval(result)


def document(result: CheckResult) -> CheckDocument:
    """The JSON verdict document (`--json`, `report.json`)."""
    engine, state = result.engine, result.engine.state
    phases = [p for c in engine.cycles for p in c.phases]
    doc = report.build(
        state.verdict,
        state.samples,
        _first_event(phases),
        phases,
        engine.cycles,
        engine.conditions.as_dict() if engine.conditions else None,
        result.error,
    )
    _run_facts(doc, result)
    _sweep(doc, result)
    _explain(doc, result)
    failure = result.config_failure
    doc["configuration_failure"] = json.loads(redact(json.dumps(failure.as_dict()))) if failure else None
    if doc.get("conditions"):  # no user:password@ of a URL in any file
        doc["conditions"] = json.loads(redact(json.dumps(doc["conditions"])))
    before, after = result.engine.first_snapshot.get("target"), result.after.get("target")
    doc["recommendation"] = rec = check_recommendation(doc, before, after)  # docs/memory.md: payback
    doc["stalled_requests"] = stalled(result.engine.requests)
    doc["output_check"] = state.output.as_dict()
    advice = output_precedence(doc, _advice(doc, result))
    doc["advice"] = advice.as_dict()
    doc["exit_code"] = exit_code(advice)
    if rec:
        rec["model_only"] = True  # evidence for `advice`, which decides
    return doc


__all__ = ["document", "error_document"]

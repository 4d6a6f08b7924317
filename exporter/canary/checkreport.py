"""`check`'s verdict document from a CheckResult (report.build does the statistics and the text)."""

from __future__ import annotations

from typing import Any

from exporter.canary import report
from exporter.canary.checkrun import CheckResult
from exporter.commands.inspect import report as interval_report
from exporter.exposition import ParseError
from exporter.normalise import normalise


def error_document(why: str) -> dict[str, Any]:
    """The document when not even the procedure could start (bad flags, keys or secret)."""
    return {"verdict": "error", "exit_code": 3, "why": why}


def _first_event(phases: list[dict[str, Any]]) -> dict[str, list[float]]:
    """Counted probes' TTFT to the first event, by path."""
    out: dict[str, list[float]] = {}
    for p in phases:
        if p["counted"] and p["ttft_first_event_seconds"] is not None:
            out.setdefault(p["path"], []).append(p["ttft_first_event_seconds"])
    return out


def _interval(result: CheckResult) -> dict[str, Any] | None:
    """The target's counters between the first and the closing scrape (evidence only)."""
    before, after = result.engine.first_snapshot.get("target"), result.after.get("target")
    if before is None or after is None:
        return None
    try:
        return interval_report(normalise(before), normalise(after))
    except ParseError:
        return None


def document(result: CheckResult) -> dict[str, Any]:
    """The JSON verdict document (`--json`, `report.json`)."""
    engine, state = result.engine, result.engine.state
    phases = result.phases()
    extra = {
        "recompute_control": state.recompute_control,
        "bytes_per_token": state.bytes_per_token,
        "tokens_spent": state.tokens_spent,
        "offload_attempts": state.offload_attempts,
        "residency_seconds": dict(state.residency),
        "rounds_requested": result.request.rounds,
        "rounds_completed": sum(1 for c in engine.cycles if c.reason != "error"),
        "rounds_failed": sum(1 for c in engine.cycles if c.reason == "error"),
        "duration_seconds": round(result.finished - result.started, 3),
        "interval": _interval(result),
    }
    return report.build(
        state.verdict,
        state.samples,
        _first_event(phases),
        phases,
        result.cycles(),
        engine.conditions.as_dict() if engine.conditions else None,
        extra,
        result.error,
    )


__all__ = ["document", "error_document"]

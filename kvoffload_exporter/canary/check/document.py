"""The `check` JSON document as typed records: one TypedDict per object, in the order the document writes its
keys (report.build, then checkreport.document). Renderers read these, never an untyped mapping: a misspelt
key is a type error, not a `?` in the text.

`CheckDocument` is `total=False`: the error document (checkreport.error_document) carries only the verdict,
its exit code, why and the advice, and a report rendered from it prints what is there.
"""

from __future__ import annotations

from typing import Any, Required, TypedDict

from kvoffload_exporter.canary.check.advice import AdviceDoc
from kvoffload_exporter.canary.check.stalls import StalledRequest
from kvoffload_exporter.canary.check.sweepreport import SweepEntry, SweepSummary
from kvoffload_exporter.canary.cycle.outputcheck import OutputCheckDoc
from kvoffload_exporter.canary.cycle.records import ConditionsDoc
from kvoffload_exporter.canary.types import Tier
from kvoffload_exporter.derive.payback import CheckRecommendation


class PathSummary(TypedDict):
    """TTFT of one canary path over the counted probes (`ttft_seconds`, `ttft_first_event_seconds`)."""

    n: int
    median: float | None
    p25: float | None
    p75: float | None
    min: float | None
    max: float | None


class DeltaEntry(TypedDict):
    """ΔTTFT against one control (`deltas`)."""

    delta_seconds: float
    ci_seconds: list[float]
    confidence: float
    n_offload: int
    n_control: int


class PhaseSummary(TypedDict):
    """One phase over all cycles: classifications counted, medians of the counter deltas (`phase_summary`)."""

    phase: str
    n: int
    classifications: dict[str, int]
    load_bytes: float | None
    store_bytes: float | None
    gpu_hit_tokens: float | None
    external_hit_tokens: float | None
    cached_tokens: float | None
    ttft_seconds: float | None


class CycleRow(TypedDict):
    """One round (`cycles`)."""

    cycle: int
    strategy: str
    result: str
    reason: str
    detail: str
    order: list[str]


class Decision(TypedDict):
    """How the run decides (`decision`): its levels, the family-wise confidence, where the exit code comes from."""

    levels: int
    confidence: float
    confidence_per_level: float
    correction: str
    exit_code_from: str


class CheckDocument(TypedDict, total=False):
    """`check --json`, `report.json`."""

    verdict: Required[str]
    exit_code: Required[int]
    why: Required[str]
    control: str | None
    delta_ttft_seconds: float | None
    delta_ttft_ci_seconds: list[float | None] | None
    deltas: dict[str, DeltaEntry]
    ttft_seconds: dict[str, PathSummary | None]
    ttft_first_event_seconds: dict[str, PathSummary | None]
    reasons: dict[str, int]
    cycles: list[CycleRow]
    phase_summary: list[PhaseSummary]
    phases: list[dict[str, object]]  # the phase records as they are (records.PhaseRecord), floats rounded
    conditions: ConditionsDoc | None
    recompute_control: str
    bytes_per_token: float | None
    tokens_spent: int
    offload_attempts: int
    residency_seconds: dict[Tier, float]
    rounds_requested: int
    rounds_completed: int
    rounds_failed: int
    duration_seconds: float
    interval: dict[str, Any] | None  # Any: inspect's interval document (derive/intervalreport), a key per Signal
    load_sweep: list[SweepEntry] | None
    load_sweep_summary: SweepSummary | None
    decision: Decision
    hints: list[str]
    configuration_failure: dict[str, object] | None  # diagnose.Failure.as_dict, redacted
    recommendation: CheckRecommendation | None
    stalled_requests: list[StalledRequest]
    output_check: OutputCheckDoc
    speed_verdict: str
    speed_why: str
    advice: AdviceDoc
    interrupted: bool


__all__ = ["CheckDocument", "CycleRow", "Decision", "DeltaEntry", "PathSummary", "PhaseSummary"]

"""The metric catalogue: every name the exporter emits, with type, unit, labels, help and source.

It is the single source of names for the collector, the dashboards, the alert rules and the docs
(`docs/metrics.md` is generated from it). Names follow Prometheus conventions: `kvoffload_` prefix,
base units, `_total` only on counters, no colons. Rows live in one module per docs section
(health, engine, backends, derived, memory, canary); their order here is the exposition order.
"""

from __future__ import annotations

from kvoffload_exporter.catalogue import backends, canary, derived, engine, guards, health, memory, transfer
from kvoffload_exporter.catalogue.metric import ENGINE, PREFIX, WINDOWED, Metric
from kvoffload_exporter.enums import (
    CanaryPath,
    CollectorName,
    ConfigWarning,
    CycleReason,
    ErrorReason,
    Group,
    HttpRejectReason,
    LoadBand,
    MemorySource,
    MetricType,
    OutputPair,
    ProbeEviction,
    ProbeResult,
    ProcessRole,
    Recommendation,
    ScrapeErrorReason,
    Signal,
    State,
    StateReason,
    Tier,
    Unit,
    VerdictKind,
)

STATES: tuple[State, ...] = tuple(State)
"""Evidence states, in the order they are documented (see derive.evidence_state)."""

STATE_REASONS: tuple[StateReason, ...] = tuple(StateReason)
CONFIG_WARNINGS: tuple[ConfigWarning, ...] = tuple(ConfigWarning)
"""Why an engine stores without loading (or a hit is degraded), in rule order (see derive/reasons.py)."""

SCRAPE_ERROR_REASONS: tuple[ScrapeErrorReason, ...] = tuple(ScrapeErrorReason)
"""Closed set of reasons for kvoffload_scrape_errors_total; never free text in labels."""

HTTP_REJECT_REASONS: tuple[HttpRejectReason, ...] = tuple(HttpRejectReason)
"""`reason` of kvoffload_exporter_http_rejected_total: what the exporter's own listener refused."""
PROBE_EVICTIONS: tuple[ProbeEviction, ...] = tuple(ProbeEviction)
VERSION_ERROR_REASONS: tuple[ScrapeErrorReason, ...] = tuple(
    ScrapeErrorReason(r) for r in ("timeout", "connect", "http_status", "too_large", "parse", "redirect", "internal")
)
"""`reason` of kvoffload_exporter_version_errors_total: the scrape-error reasons a /version answer can hit."""

RECOMMENDATIONS: tuple[Recommendation, ...] = tuple(Recommendation)
"""`recommendation` of kvoffload_recommendation (kvoffload_exporter/derive/payback.py)."""

COLLECTORS: tuple[CollectorName, ...] = tuple(CollectorName)

PROCESS_ROLES: tuple[ProcessRole, ...] = tuple(ProcessRole)
"""`role` of kvoffload_engine_process_* (with `rank`, stable across restarts, unlike a pid)."""
MEMORY_SOURCES: tuple[MemorySource, ...] = tuple(MemorySource)

CANARY_PATHS: tuple[CanaryPath, ...] = tuple(CanaryPath)
CANARY_RESULTS: tuple[ProbeResult, ...] = tuple(ProbeResult)
CANARY_VERDICTS: tuple[VerdictKind, ...] = tuple(VerdictKind)
CANARY_OUTPUT_PAIRS: tuple[OutputPair, ...] = tuple(OutputPair)
"""`pair` of the output check's counters (canary/cycle/outputcheck.py)."""
CANARY_REASONS: tuple[CycleReason, ...] = tuple(CycleReason)
"""Why a canary cycle ended as it did (closed set; see docs/canary.md)."""
CANARY_ERROR_REASONS: tuple[ErrorReason, ...] = tuple(ErrorReason)
"""Why a canary request, preparation or cycle failed (closed set; see kvoffload_exporter/canary/types.py)."""
CANARY_TIERS: tuple[Tier, ...] = tuple(Tier)
CANARY_LOAD_BANDS: tuple[LoadBand, ...] = tuple(LoadBand)
"""Load bands of serve --canary.enabled cycles (thresholds: kvoffload_exporter/canary/records.load_band)."""

STATE_MEANINGS = derived.STATE_MEANINGS
evidence_metric = backends.evidence_metric
unit_size_name = backends.unit_size_name

CATALOGUE: dict[str, Metric] = {
    m.name: m for part in (health, guards, engine, backends, transfer, derived, memory, canary) for m in part.METRICS
}

SIGNAL_METRICS: tuple[tuple[Signal, Metric], ...] = tuple(
    (m.signal, m) for m in CATALOGUE.values() if m.signal is not None
)
"""(signal, metric) for every per-engine signal the collector exports as is, in catalogue order."""


def metric(name: str) -> Metric:
    """Look a metric up; a KeyError here means a name is used that the catalogue does not own."""
    return CATALOGUE[name]


__all__ = [
    "CANARY_ERROR_REASONS",
    "CANARY_LOAD_BANDS",
    "CANARY_OUTPUT_PAIRS",
    "CANARY_PATHS",
    "CANARY_REASONS",
    "CANARY_RESULTS",
    "CANARY_TIERS",
    "CANARY_VERDICTS",
    "CATALOGUE",
    "COLLECTORS",
    "CONFIG_WARNINGS",
    "ENGINE",
    "HTTP_REJECT_REASONS",
    "MEMORY_SOURCES",
    "PREFIX",
    "PROBE_EVICTIONS",
    "PROCESS_ROLES",
    "RECOMMENDATIONS",
    "SCRAPE_ERROR_REASONS",
    "SIGNAL_METRICS",
    "STATES",
    "STATE_MEANINGS",
    "STATE_REASONS",
    "VERSION_ERROR_REASONS",
    "WINDOWED",
    "Group",
    "Metric",
    "MetricType",
    "Signal",
    "Unit",
    "evidence_metric",
    "metric",
    "unit_size_name",
]

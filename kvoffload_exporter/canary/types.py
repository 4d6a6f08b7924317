"""Closed sets of the canary as StrEnums (neutral module: the engine, stats and report share them without
importing each other). Those that are label values of the metric catalogue are defined with the core's
sets in `kvoffload_exporter.enums` (the catalogue never imports the canary) and re-exported here."""

from __future__ import annotations

from enum import StrEnum

from kvoffload_exporter.enums import CanaryPath, CycleReason, ErrorReason, LoadBand, ProbeResult, Tier, VerdictKind


class Strategy(StrEnum):
    """How a cycle displaces its prefix: fillers (pressure, staging only) or growing idle times (wait)."""

    PRESSURE = "pressure"
    WAIT = "wait"


__all__ = ["CanaryPath", "CycleReason", "ErrorReason", "LoadBand", "ProbeResult", "Strategy", "Tier", "VerdictKind"]

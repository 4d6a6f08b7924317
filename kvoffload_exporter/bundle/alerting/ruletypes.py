"""The two rule records, a recording rule and an alert, and how an alert renders as a Prometheus rule.

Apart from `rules` so that the builder stays one job and every reader of rules (rule files, Grafana
alerts, promtool cases, runbook, docs) imports the records without the builder.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class AlertName(StrEnum):
    """Every alert's name, defined once: the rules, their promtool cases and their steps name the member."""

    STORE_WITHOUT_LOAD = "KVOffloadStoreWithoutLoad"
    NOT_STORING = "KVOffloadNotStoring"
    ENGINE_IMBALANCE = "KVOffloadEngineImbalance"
    SLOWER_THAN_RECOMPUTE = "KVOffloadSlowerThanRecompute"
    SLOWER_UNDER_LOAD = "KVOffloadSlowerUnderLoad"
    TTFT_REGRESSION = "KVOffloadTTFTRegression"
    METRICS_ABSENT = "KVOffloadMetricsAbsent"
    EXPORTER_TARGET_DOWN = "KVOffloadExporterTargetDown"
    HOST_MEMORY_HEADROOM_LOW = "KVOffloadHostMemoryHeadroomLow"
    TIER_OVERCOMMITTED = "KVOffloadTierOvercommitted"
    OOM_RISK = "KVOffloadOOMRisk"
    ALLOCATION_FAILURES = "KVOffloadAllocationFailures"
    TIER_DROPPING_WRITES = "KVOffloadTierDroppingWrites"
    STORE_ERRORS = "KVOffloadStoreErrors"
    CANARY_FAILING = "KVOffloadCanaryFailing"
    CANARY_NO_OFFLOAD_HIT = "KVOffloadCanaryNoOffloadHit"
    OUTPUT_MISMATCH = "KVOffloadOutputMismatch"
    INTEGRITY_RISK = "KVOffloadIntegrityRisk"
    # the monitoring itself (bundle/alerting/fleet_rules.py): Prometheus's own `up` of the exporter's jobs
    EXPORTER_DOWN = "KVOffloadExporterDown"
    EXPORTER_JOB_VANISHED = "KVOffloadExporterJobVanished"
    EXPORTER_ABSENT = "KVOffloadExporterAbsent"


@dataclass(frozen=True)
class RecordingRule:
    record: str
    expr: str


@dataclass(frozen=True)
class AlertRule:
    alert: str
    expr: str
    for_: str
    severity: str
    summary: str
    description: str  # Prometheus template: $labels, $value
    group: str = "kvoffload.alerts"
    grafana_presence: str = ""
    """For an alert on something missing (`absent()`): a query that returns data while all is well. The
    Grafana-managed copy queries it and alerts on *no data* instead (Grafana's own form of absence)."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "alert", str(self.alert))  # an AlertName as the plain string files carry

    @property
    def anchor(self) -> str:
        return self.alert.lower()

    def runbook_url(self, base: str) -> str:
        return f"{base}#{self.anchor}"

    def prometheus_rule(self, runbook_base: str) -> dict[str, object]:
        """The rule as a Prometheus rule file lists it (also what promtool tests the Grafana copy with)."""
        return {
            "alert": self.alert,
            "expr": self.expr,
            "for": self.for_,
            "labels": {"severity": self.severity},
            "annotations": {
                "summary": self.summary,
                "description": self.description,
                "runbook_url": self.runbook_url(runbook_base),
            },
        }


__all__ = ["AlertName", "AlertRule", "RecordingRule"]

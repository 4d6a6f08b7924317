"""One catalogue row: a keyword-only, typed description of an exported metric family."""

from __future__ import annotations

from dataclasses import dataclass

from kvoffload_exporter.enums import Group, MetricType, Signal, Unit

PREFIX = "kvoffload_"

ENGINE = ("target", "model_name", "engine")
WINDOWED = (*ENGINE, "window")


@dataclass(frozen=True, kw_only=True)
class Metric:
    """Keyword-only so that `unit` and `source` (both plain words) can never be swapped by position."""

    name: str
    type: MetricType
    help: str
    labels: tuple[str, ...] = ()
    unit: Unit = Unit.NONE
    source: str = ""  # upstream vLLM family or system call this is derived from
    group: Group = Group.ENGINE  # docs/dashboards section
    signal: Signal | None = None  # the per-engine model signal the collector exports under this name

    @property
    def prom_type(self) -> str:
        """The TYPE written in the text exposition (statesets and infos are gauges there)."""
        if self.type in (MetricType.COUNTER, MetricType.HISTOGRAM, MetricType.SUMMARY):
            return str(self.type)
        return "gauge"

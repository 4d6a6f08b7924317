"""The `Cycle` protocol: one probe strategy (pressure.py, wait.py), chosen by `settings.strategy`."""

from __future__ import annotations

from typing import Protocol

from kvoffload_exporter.canary.cycle.prepared import PreparedRun
from kvoffload_exporter.canary.cycle.records import CycleRecord
from kvoffload_exporter.canary.types import Strategy


class Cycle(Protocol):
    """One strategy: its token cost estimate and the phases of one cycle (filled into `rec`)."""

    name: Strategy

    def cost(self, run: PreparedRun) -> int:
        """Upper estimate of one cycle's tokens (checked against the budget before starting)."""
        ...

    async def run(self, run: PreparedRun, c: int, rec: CycleRecord) -> None:
        """The cycle's phases; sets rec.result, rec.reason and rec.detail. Raises CycleFailed/BudgetExhausted."""
        ...

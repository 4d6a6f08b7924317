"""Pressure strategy: displace the seeded prefix from the GPU with filler requests, then revisit it.

Deterministic and fast, but the fillers evict users' GPU cache too: staging only (`allow_pressure`).
"""

from __future__ import annotations

from kvoffload_exporter.canary.cycle import outputs, steps
from kvoffload_exporter.canary.cycle.prepared import PreparedRun
from kvoffload_exporter.canary.cycle.records import CycleRecord
from kvoffload_exporter.canary.types import Strategy


class PressureCycle:
    name = Strategy.PRESSURE

    def cost(self, run: PreparedRun) -> int:
        sz = run.sizing
        fill = sz.filler_count * (sz.filler_tokens + 1) + sz.flush_tokens + 1
        return run.probe_cost(run.base_probes()) + fill

    async def run(self, run: PreparedRun, c: int, rec: CycleRecord) -> None:
        seeded = await steps.seed_and_revisit(run, c, rec)
        rec.phases.append(await run.displace(c))
        rev, cls, got = await steps.revisit_and_controls(run, c, rec, seeded)
        steps.judge(run, rec, rev, cls, seeded.stored, got)
        await outputs.compare(run, c, rec, seeded)

"""Wait strategy: no fillers; revisit the prefix after doubling idle times and let real traffic evict
it. Safe in production, and it measures how long a prefix stays reusable per tier (residency).
"""

from __future__ import annotations

from kvoffload_exporter.canary.config import CanarySettings
from kvoffload_exporter.canary.cycle import outputs, steps
from kvoffload_exporter.canary.cycle.prepared import PreparedRun, Probe
from kvoffload_exporter.canary.cycle.records import CycleRecord
from kvoffload_exporter.canary.types import CanaryPath, CycleReason, ProbeResult, Strategy, Tier


def wait_steps(initial: float, maximum: float) -> int:
    """Revisits per cycle: idle times initial, 2·initial, … up to `maximum`."""
    n, idle = 1, initial
    while idle * 2 <= maximum:
        idle *= 2
        n += 1
    return n


class WaitCycle:
    name = Strategy.WAIT

    def cost(self, run: PreparedRun) -> int:
        s = run.ctx.settings
        extra = max(0, wait_steps(s.wait_initial, s.wait_max) - 1)
        return run.probe_cost(run.base_probes() + extra)

    async def run(self, run: PreparedRun, c: int, rec: CycleRecord) -> None:
        seeded = await steps.seed_and_revisit(run, c, rec)
        e, s = run.ctx, run.ctx.settings
        idle = s.wait_initial
        while True:
            await e.sleep(idle)
            probe = Probe(
                "wait_revisit",
                seeded.a + seeded.t,
                expect=ProbeResult.OFFLOAD_HIT,
                path=CanaryPath.OFFLOAD_HIT,
                idle=idle,
            )
            rev, cls = await run.probe(c, probe)
            rec.phases.append(rev)
            if cls.result != ProbeResult.GPU_HIT:
                break
            steps.count(run, rev, cls, ProbeResult.OFFLOAD_HIT)
            steps.probe_done(run, rev)
            e.state.residency[Tier.GPU] = max(e.state.residency.get(Tier.GPU, 0.0), idle)
            if idle * 2 > s.wait_max:
                rec.result, rec.reason = ProbeResult.GPU_HIT, CycleReason.NOT_DISPLACED
                rec.detail = f"still on the GPU after {idle:.0f}s idle"
                return
            idle *= 2
        steps.revisit_done(run, rev, cls)
        if cls.result == ProbeResult.OFFLOAD_HIT:
            e.state.residency[Tier.OFFLOAD] = max(e.state.residency.get(Tier.OFFLOAD, 0.0), idle)
        if cls.result in (
            ProbeResult.OFFLOAD_HIT,
            ProbeResult.MISS,
            ProbeResult.PARTIAL,
        ):  # left the GPU: did the tier still have it?
            e.state.tier_revisits.append((idle, cls.result == ProbeResult.OFFLOAD_HIT))
        got = await steps.controls(run, c, rec, seeded, idle)
        steps.judge(run, rec, rev, cls, seeded.stored, got)
        await outputs.compare(run, c, rec, seeded)


def wait_notice(s: CanarySettings) -> str:
    """What the wait strategy waits for, for how long at most, and how to skip it, before its first wait."""
    idle, waits = s.wait_initial, []
    while idle <= s.wait_max:
        waits.append(idle)
        idle *= 2
    worst = sum(waits)
    return (
        "wait strategy: each round waits for other traffic to displace the canary's prefix from the "
        f"GPU cache, idle {waits[0]:.0f} s doubling up to {waits[-1]:.0f} s (at most {worst / 60:.0f} min a round); "
        "on an idle server nothing displaces it: --allow-pressure displaces it with fillers instead (staging)"
    )

"""The output check's step of a cycle: compare the displaced revisit's answer with the GPU revisit's and the
cold control's (the same prompt), after sending the run's one sensitivity probe (outputcheck.py says why)."""

from __future__ import annotations

from kvoffload_exporter.canary.cycle.outputcheck import changed_positions, changed_prefix
from kvoffload_exporter.canary.cycle.prepared import PreparedRun, Probe
from kvoffload_exporter.canary.cycle.records import TARGET, CycleRecord, PhaseRecord
from kvoffload_exporter.canary.cycle.steps import Seeded
from kvoffload_exporter.canary.types import CanaryPath, ProbeResult
from kvoffload_exporter.enums import OutputPair

REFERENCES = (
    (OutputPair.OFFLOAD_VS_GPU, "gpu_revisit", ProbeResult.GPU_HIT),
    (OutputPair.OFFLOAD_VS_RECOMPUTE, "cold", ProbeResult.MISS),
)
"""Each pair's reference phase and the classification it must have had to be that reference."""


def _last(rec: CycleRecord, phases: tuple[str, ...]) -> PhaseRecord | None:
    return next((p for p in reversed(rec.phases) if p.phase in phases), None)


async def _sensitivity(run: PreparedRun, c: int, rec: CycleRecord, seeded: Seeded, reference: list[int]) -> None:
    """Once per run: the same prompt with prefix tokens changed (outputcheck.CHANGED), recomputed (a fresh salt)."""
    prompts = run.ctx.prompts
    prompt = changed_prefix(seeded.a, prompts.lo, prompts.hi) + seeded.t
    ph, _ = await run.probe(
        c, Probe("sensitivity", prompt, expect=ProbeResult.MISS, path=CanaryPath.COLD, fresh_salt=True)
    )
    rec.phases.append(ph)  # evidence only: never a TTFT sample, never a probe of the tier
    run.ctx.state.output.sense(c, reference, ph.output_token_ids or [], changed_positions(len(seeded.a)))


async def _gpu_repeat(run: PreparedRun, c: int, seeded: Seeded) -> list[int] | None:
    """A second GPU hit of the cycle's prompt from KV no tier touched, sent after the offload revisit (so a
    drift between the GPU revisit and the offload revisit shows), only in a cycle whose offload answer differed
    from the GPU revisit's (a healthy run sends none): the cycle's own path again under a fresh salt, back to
    back so that other traffic has no time to evict it (prefix + a fresh tail computed, like the seed; then
    the prompt, a GPU hit, like the GPU revisit). None when most of the prefix was recomputed rather than
    read from the GPU cache (nothing to compare)."""
    salt = run.ctx.prompts.fresh_salt("probe")
    await run.send(c, "gpu_repeat_seed", "probe", TARGET, run.tail(seeded.a), salt)
    comp = await run.send(c, "gpu_repeat", "probe", TARGET, seeded.a + seeded.t, salt)
    cached = comp.cached_tokens
    if not comp.token_ids or (cached is not None and cached < len(seeded.a) // 2):  # recomputed, not a hit
        return None
    return comp.token_ids


async def compare(run: PreparedRun, c: int, rec: CycleRecord, seeded: Seeded) -> None:
    """An offload hit with token ids against every reference the cycle has; nothing without an offload hit."""
    rev = _last(rec, ("offload_revisit", "wait_revisit"))
    if rev is None or rev.classification != ProbeResult.OFFLOAD_HIT or not rev.output_token_ids:
        return
    refs: list[tuple[OutputPair, list[int]]] = []
    for pair, phase, wanted in REFERENCES:
        ph = _last(rec, (phase,))
        if ph is not None and ph.classification == wanted and ph.output_token_ids:
            refs.append((pair, ph.output_token_ids))
    if not refs:
        return
    out = run.ctx.state.output
    by_pair = dict(refs)
    gpu, recompute = by_pair.get(OutputPair.OFFLOAD_VS_GPU), by_pair.get(OutputPair.OFFLOAD_VS_RECOMPUTE)
    if gpu is not None and recompute is not None:
        out.calibrate(gpu, recompute)  # before the pairs: this cycle's recompute pair needs it
    if gpu is not None and list(gpu) != list(rev.output_token_ids):  # only a difference needs the check
        again = await _gpu_repeat(run, c, seeded)
        if again is not None:
            out.reproduce(gpu, again)  # before the pairs: this cycle's GPU pair needs it
    if out.sensitive is None:
        await _sensitivity(run, c, rec, seeded, refs[-1][1])  # the recompute's answer where there is one
    for pair, ids in refs:
        out.add(c, pair, rev.output_token_ids, ids, loaded=True)  # an offload hit: served by a load


__all__ = ["REFERENCES", "compare"]

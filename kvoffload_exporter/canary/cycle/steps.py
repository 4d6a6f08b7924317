"""Cycle steps both strategies share: seed and GPU revisit, the controls, the revisit's bookkeeping
and the cycle's judgement. Each step appends its phase records to the cycle record it is given.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from kvoffload_exporter.canary.cycle.prepared import PreparedRun, Probe
from kvoffload_exporter.canary.cycle.records import CONTROL, TARGET, CycleRecord, PhaseRecord
from kvoffload_exporter.canary.cycle.stats import CONTROL_ORDER
from kvoffload_exporter.canary.types import CanaryPath, CycleReason, ProbeResult
from kvoffload_exporter.canary.wire.classify import Classification, Deltas, revisit_reason
from kvoffload_exporter.ingest.snapshot import Snapshot


@dataclass(frozen=True)
class Seeded:
    """What the seed steps leave for the rest of a cycle: both prefixes and whether anything stored."""

    a: list[int]
    b: list[int] | None
    stored: bool
    t: list[int]  # the cycle's tail: GPU revisit, displaced revisit and cold control ask the same prompt a + t


def count(run: PreparedRun, rec: PhaseRecord, cls: Classification, wanted: str) -> None:
    """Put a probe's TTFT into the statistics of `rec.path` when its classification is `wanted`."""
    if rec.ttft_seconds is None or cls.ambiguous or cls.result != wanted:
        return
    run.ctx.state.observe(rec.path, rec.ttft_seconds)
    rec.counted = True


def probe_done(run: PreparedRun, rec: PhaseRecord) -> None:
    """Count the probe's classification (seeds are not probes of the tier)."""
    if rec.phase not in ("seed", "seed_b") and rec.classification:
        run.ctx.state.probes[rec.classification] += 1


async def _seed(run: PreparedRun, c: int, rec: CycleRecord, prompt: list[int], phase: str) -> PhaseRecord:
    ph, _ = await run.probe(c, Probe(phase, run.tail(prompt), expect=ProbeResult.MISS, path=CanaryPath.COLD))
    rec.phases.append(ph)  # never pooled into the cold control: a seed runs at another point of the cycle
    return ph


@dataclass(frozen=True)
class _Span:
    """Where the seeding span's counting starts: prompt tokens from `pre`, stored bytes from `start`,
    with an engine step (the opening flush) between them."""

    pre: Snapshot
    start: Snapshot
    sent: int  # tokens the canary had sent to the target before `pre`


async def _open_span(run: PreparedRun, c: int) -> _Span:
    """Why a step between two reads: a store is reported at the first engine step after it was issued,
    and its request's prompt tokens were counted by then. Every store reported after `start` was
    therefore issued after the flush, by a request counted after `pre`: stored bytes over prompt
    tokens counted from `pre` never exceed the true bytes per token, however late a store is reported
    (a window that began at `start` counted such stragglers' bytes without their tokens)."""
    scrapes = run.ctx.scrapes
    pre = await scrapes.scrape(TARGET)
    sent = run.sent[TARGET]
    await run.flush(c, "seed", TARGET)
    return _Span(pre, await scrapes.scrape(TARGET), sent)


def _learn(run: PreparedRun, span: _Span, seeds: int) -> None:
    """Bytes per token from the seeding span: the seeds' prefixes plus every other prompt token."""
    after = run.ctx.scrapes.last(TARGET)
    if after is None or not seeds:
        return
    model = run.conditions.server(TARGET).model
    stored = Deltas.between(span.start, after, model).store_bytes
    if stored > 0:
        others = Deltas.between(span.pre, after, model).others(run.sent[TARGET] - span.sent)
        run.ctx.state.learn_bytes_per_token(stored, seeds * run.sizing.prefix_tokens, others)


async def seed_and_revisit(run: PreparedRun, c: int, rec: CycleRecord) -> Seeded:
    """Seed prefix A (and B for the recompute control), revisit A on the GPU; learn bytes/token from A's seed."""
    prompts = run.ctx.prompts
    a = prompts.prefix(run.sizing, c, "A")
    b = prompts.prefix(run.sizing, c, "B") if run.ctx.state.uses_recompute() else None
    t = prompts.tail(run.sizing)
    span = await _open_span(run, c)
    seed = await _seed(run, c, rec, a, "seed")
    # Learned over seed A alone: the GPU revisit after it stores again on a tier whose lookups always miss
    # (store_without_load), and its bytes would count against the seeds' prefix tokens only (1.5x on 0.26).
    _learn(run, span, 1)
    ph, cls = await run.probe(c, Probe("gpu_revisit", a + t, expect=ProbeResult.GPU_HIT, path=CanaryPath.GPU_HIT))
    count(run, ph, cls, ProbeResult.GPU_HIT)
    probe_done(run, ph)
    rec.phases.append(ph)
    # B is seeded after A's GPU revisit: A and B together may not fit the GPU cache.
    seed_b = await _seed(run, c, rec, b, "seed_b") if b is not None else None
    seeded = [seed, ph] + ([seed_b] if seed_b else [])
    return Seeded(a, b, any(p.stored for p in seeded), t)


def revisit_done(run: PreparedRun, rev: PhaseRecord, cls: Classification) -> None:
    """A displaced revisit: counted for the offload path, an attempt of the tier."""
    state = run.ctx.state
    count(run, rev, cls, ProbeResult.OFFLOAD_HIT)
    if cls.result != ProbeResult.GPU_HIT:
        state.offload_attempts += 1  # displaced: the tier had its chance
    if cls.result == ProbeResult.OFFLOAD_HIT:
        state.offload_hits_seen += 1
    probe_done(run, rev)


def _recompute_seen(run: PreparedRun, ph: PhaseRecord, cls: Classification) -> None:
    """Never trust the request: the counters say whether the server honoured max_load_tokens 0."""
    state = run.ctx.state
    if cls.result == ProbeResult.OFFLOAD_HIT or (cls.result == ProbeResult.PARTIAL and ph.loaded):
        state.recompute_control = "ignored"
        ph.note = (ph.note + "; " if ph.note else "") + "max_load_tokens ignored by the server (loaded anyway)"
        state.offload_hits_seen += 1
    elif cls.result == ProbeResult.MISS and not ph.loaded:
        # Without offload families no load was possible: that proves nothing about the key.
        state.recompute_control = "honoured" if run.target.generation != "none" else "no_connector"
        count(run, ph, cls, ProbeResult.MISS)


def _control_probes(run: PreparedRun, seeded: Seeded, idle: float | None) -> dict[str, Callable[[], Probe]]:
    """Recompute (B with max_load_tokens 0), cold (A with a fresh salt), A on the control target, by kind.

    Makers, not probes: each prompt's tail is drawn only when its probe runs, after the previous one's.
    """
    makers: dict[str, Callable[[], Probe]] = {}
    b = seeded.b
    if b is not None:
        kv = {"max_load_tokens": 0}
        makers["recompute"] = lambda: Probe(
            "recompute", run.tail(b), expect=ProbeResult.MISS, path=CanaryPath.RECOMPUTE, kv=kv, idle=idle
        )
    makers["cold"] = lambda: Probe(
        "cold", seeded.a + seeded.t, expect=ProbeResult.MISS, path=CanaryPath.COLD, fresh_salt=True
    )
    if run.ctx.control_url:
        makers["control_target"] = lambda: Probe(
            "control_target", run.tail(seeded.a), expect=ProbeResult.MISS, path=CanaryPath.CONTROL_TARGET, role=CONTROL
        )
    return makers


async def revisit(run: PreparedRun, c: int, rec: CycleRecord, seeded: Seeded) -> tuple[PhaseRecord, Classification]:
    """The displaced revisit of prefix A (pressure strategy)."""
    rev, cls = await run.probe(
        c, Probe("offload_revisit", seeded.a + seeded.t, expect=ProbeResult.OFFLOAD_HIT, path=CanaryPath.OFFLOAD_HIT)
    )
    revisit_done(run, rev, cls)
    rec.phases.append(rev)
    return rev, cls


REVISIT = "offload_revisit"


async def revisit_and_controls(
    run: PreparedRun, c: int, rec: CycleRecord, seeded: Seeded
) -> tuple[PhaseRecord, Classification, dict[str, float]]:
    """The displaced revisit and the controls in the round's order (order.py: balanced over the rounds,
    drawn from the seed), recorded in `rec.order`: no path keeps one place after the displacement (stores
    still draining, a warm scheduler)."""
    makers = _control_probes(run, seeded, None)
    rec.order = run.ctx.state.orders.next([REVISIT, *makers])
    got: dict[str, float] = {}
    done: list[tuple[PhaseRecord, Classification]] = []
    for kind in rec.order:
        if kind == REVISIT:
            done.append(await revisit(run, c, rec, seeded))
        else:
            await _control(run, c, rec, makers[kind](), got)
    rev, cls = done[0]
    return rev, cls, got


async def _control(run: PreparedRun, c: int, rec: CycleRecord, p: Probe, got: dict[str, float]) -> None:
    """One control probe; its counted TTFT into `got` by path."""
    ph, cls = await run.probe(c, p)
    if p.path == "recompute":
        _recompute_seen(run, ph, cls)
    else:
        count(run, ph, cls, ProbeResult.MISS)
    probe_done(run, ph)
    rec.phases.append(ph)
    if ph.counted and ph.ttft_seconds is not None:
        got[p.path] = ph.ttft_seconds


async def controls(
    run: PreparedRun, c: int, rec: CycleRecord, seeded: Seeded, idle: float | None = None
) -> dict[str, float]:
    """The control probes after the wait ladder's revisit (which ends the ladder, so it comes first), in a
    balanced order among themselves; their counted TTFTs by path."""
    makers = _control_probes(run, seeded, idle)
    order = run.ctx.state.orders.next(list(makers))
    rec.order = ["wait_revisit", *order]
    got: dict[str, float] = {}
    for kind in order:
        await _control(run, c, rec, makers[kind](), got)
    return got


def judge(
    run: PreparedRun, rec: CycleRecord, rev: PhaseRecord, cls: Classification, stored: bool, got: dict[str, float]
) -> None:
    """The cycle's result and reason from the displaced revisit and the controls."""
    rec.result = ProbeResult(cls.result)
    if cls.result == ProbeResult.OFFLOAD_HIT:
        ctl = next((got[k] for k in CONTROL_ORDER if k in got), None)
        ttft = rev.ttft_seconds
        slower = ctl is not None and ttft is not None and ttft > ctl
        rec.reason = CycleReason.LOADED_BUT_SLOWER if slower else CycleReason.OK
        if ctl is not None and ttft is not None:
            rec.detail = f"offload {ttft * 1000:.1f} ms vs control {ctl * 1000:.1f} ms"
        return
    gpu_part = cls.result == ProbeResult.PARTIAL and rev.gpu_hit_tokens > 0 and not rev.loaded
    seen = run.ctx.state.offload_hits_seen > 0 or rev.loaded
    rec.reason = revisit_reason(cls.result, stored, seen, gpu_part)
    rec.detail = cls.note


__all__ = [
    "Seeded",
    "controls",
    "count",
    "judge",
    "probe_done",
    "revisit",
    "revisit_and_controls",
    "revisit_done",
    "seed_and_revisit",
]

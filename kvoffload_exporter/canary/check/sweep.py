"""`check --concurrency 1,4,16`: payoff under load, measured in bursts; statistics in sweepreport.

Why: the idle verdict does not carry over to peak load. The burst is the unit: the c requests of one
burst share one queue and one scheduler step, so a level runs until it has `--min-bursts` counted bursts
per path and its interval resamples bursts (stats.cluster_delta). One round of a level: seed prefix A
(and B for the in-band control), displace both from the GPU with fillers, then a burst of c requests
A + own tail at once and a burst of c controls (B with `max_load_tokens: 0` where the server honoured
it in the ordinary rounds, else A on the control target, else A under one fresh salt), their order
alternating by round, the levels taking turns. A burst is judged from its own usage and the counters
around it; a burst that was not displaced, or that other traffic could explain, is left out.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TextIO

from kvoffload_exporter.canary.check.sweepreport import Level
from kvoffload_exporter.canary.cycle.plan import OUTPUT_TOKENS, Sizing
from kvoffload_exporter.canary.cycle.prepared import PreparedRun
from kvoffload_exporter.canary.cycle.records import CONTROL, TARGET, RequestRecord
from kvoffload_exporter.canary.cycle.sequential import Design
from kvoffload_exporter.canary.wire.classify import Deltas
from kvoffload_exporter.canary.wire.errors import BudgetExhausted, CycleFailed
from kvoffload_exporter.canary.wire.protocol import Completion
from kvoffload_exporter.enums import OutputPair, OutputResult

FIRST_CYCLE = 100_000  # sweep request records' `cycle`: apart from the ordinary rounds'


@dataclass(frozen=True)
class SweepRequest:
    levels: tuple[int, ...]
    prefixes: tuple[int, ...]  # empty: the run's planned prefix only
    min_bursts: int = 10  # counted bursts per path and level at most: the last look (`--min-bursts`)
    family_confidence: float = 0.95  # the chance that a run with no effect decides no level at all

    @property
    def family(self) -> int:
        """Levels one run decides on: every (concurrency, prefix) cell, plus the rounds as c = 1 when the
        sweep leaves 1 out (the advice reads the rounds as that level)."""
        return len(self.levels) * max(1, len(self.prefixes)) + (0 if 1 in self.levels else 1)

    @property
    def per_level_confidence(self) -> float:
        """Bonferroni: each level at 1 - (1 - family) / levels, so that with no effect the chance that any
        level of the run decides (and the advice acts) is at most 1 - family_confidence. Chosen over Holm so
        that a printed interval excludes 0 exactly when its level decides."""
        return 1.0 - (1.0 - self.family_confidence) / self.family


def parse_levels(raw: str) -> tuple[int, ...]:
    """ "1,4,16" → (1, 4, 16); ValueError with the reason (argparse turns it into exit 2)."""
    try:
        levels = tuple(sorted({int(x) for x in raw.split(",") if x.strip()}))
    except ValueError:
        raise ValueError(f"not a comma-separated list of integers: {raw!r}") from None
    if not levels or levels[0] < 1:
        raise ValueError(f"every level must be >= 1: {raw!r}")
    return levels


def control_of(run: PreparedRun) -> str:
    """The in-band control when the ordinary rounds proved it honoured, else the existing controls."""
    if run.ctx.state.recompute_control == "honoured":
        return "recompute"
    return "control_target" if run.ctx.control_url else "cold"


async def _burst(
    run: PreparedRun,
    cycle: int,
    phase: str,
    role: str,
    prompts: list[list[int]],
    salt: str,
    kv: Mapping[str, object] | None,
    max_tokens: int = 1,
) -> tuple[list[Completion], Deltas, list[RequestRecord]]:
    before = await run.ctx.scrapes.before(role)
    comps, recs = await run.send_burst(cycle, phase, role, prompts, salt, kv, max_tokens)
    await run.flush(cycle, phase, role)
    after = await run.ctx.scrapes.scrape(role)
    return comps, Deltas.between(before, after, run.conditions.server(role).model), recs


def _full(comps: Sequence[Completion], need: int) -> bool | None:
    cached = [c.cached_tokens for c in comps]
    return None if any(x is None for x in cached) else all(int(x or 0) >= need for x in cached)


def _judge_offload(run: PreparedRun, sz: Sizing, comps: list[Completion], d: Deltas, lv: Level) -> bool:
    """Counted when every revisit was a full hit and at least one whole prefix was loaded."""
    need = sz.prefix_tokens - sz.tolerance
    bpt = run.ctx.state.bytes_per_token
    loaded = d.load_bytes > 0 and (not bpt or d.load_bytes / bpt >= need)
    full = _full(comps, need)
    if not loaded:
        if full:
            lv.notes.append("a burst was still on the GPU (not displaced): raise --filler-tokens")
        else:
            lv.attempts += 1
            lv.notes.append("a displaced burst loaded nothing (tier miss)")
        return False
    lv.attempts += 1
    if full is False:
        lv.notes.append("a revisit of a loaded burst was not a full hit")
        return False
    lv.hit_bursts += 1
    return True


def _judge_control(comps: list[Completion], d: Deltas, lv: Level) -> bool:
    if d.load_bytes > 0:
        lv.notes.append("a control burst loaded from the tier (max_load_tokens ignored, or other traffic)")
        return False
    return True


def _keep(
    lv: Level,
    cycle: int,
    comps: Sequence[Completion],
    recs: Sequence[RequestRecord],
    judged: bool,
    bursts: list[list[float]],
    cycles: list[int],
) -> None:
    """A judged burst into its path's bursts (with its round's `cycle`), or left out; its request records
    say which (`counted`), so the interval can be recomputed from requests.jsonl."""
    burst = [c.ttft_token for c in comps if c.ttft_token is not None]
    counted = judged and bool(burst)
    for r in recs:
        r.counted = counted
    if counted:
        bursts.append(burst)
        cycles.append(cycle)
    else:
        lv.left_out += 1


def _compare(run: PreparedRun, lv: Level, cycle: int, comps: Sequence[Completion], reference: list[int]) -> None:
    """Every answer of a counted offload burst against the seed's, the same prompt recomputed (outputcheck.py)."""
    if not reference:
        return
    for c in comps:
        if c.token_ids:
            rec = run.ctx.state.output.add(cycle, OutputPair.OFFLOAD_VS_RECOMPUTE, c.token_ids, reference)
            lv.output_compared += rec.result != OutputResult.UNVERIFIABLE
            lv.output_mismatched += rec.result == OutputResult.MISMATCH


async def _round(run: PreparedRun, lv: Level, cycle: int) -> None:
    e, sz = run.ctx, replace(run.sizing, prefix_tokens=lv.prefix_tokens)
    a = e.prompts.tokens(sz.prefix_tokens, "sweep", cycle, "A")
    b = e.prompts.tokens(sz.prefix_tokens, "sweep", cycle, "B") if lv.control == "recompute" else None
    t = e.prompts.tail(sz)  # A's seed and every revisit of the burst ask the same prompt: comparable answers
    reference: list[int] = []
    for prefix in (a, b):
        if prefix is not None:
            tail = t if prefix is a else e.prompts.tail(sz)
            comp = await run.send(cycle, "sweep_seed", "probe", TARGET, prefix + tail, e.prompts.salt)
            reference = comp.token_ids if prefix is a else reference
            await run.flush(cycle, "sweep_seed", TARGET)
    await run.displace(cycle)

    async def offload() -> None:
        prompts = [a + t for _ in range(lv.concurrency)]
        comps, d, recs = await _burst(run, cycle, "sweep_offload", TARGET, prompts, e.prompts.salt, None, OUTPUT_TOKENS)
        judged = _judge_offload(run, sz, comps, d, lv)
        _keep(lv, cycle, comps, recs, judged, lv.offload_bursts, lv.offload_cycles)
        if judged:
            _compare(run, lv, cycle, comps, reference)

    async def control() -> None:
        base = b if b is not None else a
        prompts = [base + e.prompts.tail(sz) for _ in range(lv.concurrency)]
        role = CONTROL if lv.control == "control_target" else TARGET
        salt = e.prompts.fresh_salt("sweep") if lv.control == "cold" else e.prompts.salt
        kv = {"max_load_tokens": 0} if lv.control == "recompute" else None
        comps, d, recs = await _burst(run, cycle, "sweep_control", role, prompts, salt, kv)
        _keep(lv, cycle, comps, recs, _judge_control(comps, d, lv), lv.control_bursts, lv.control_cycles)

    first, second = (offload, control) if lv.rounds % 2 == 0 else (control, offload)
    await first()
    await second()


MIN_COUNTED_SHARE = 0.2
"""The round budget follows the counted bursts down to this share of rounds that count (5 × need + 1 rounds)."""


def round_budget(lv: Level, need: int) -> int:
    """Rounds a level may take: 2 × need + 1, more when background traffic leaves bursts out, so that the
    rounds it still has can reach `need` counted bursts a path at the share that counted so far."""
    counted = min(len(lv.offload_bursts), len(lv.control_bursts))
    share = max(counted / lv.rounds if lv.rounds else 1.0, MIN_COUNTED_SHARE)
    return max(2 * need + 1, math.ceil(need / share) + 1)


def _pending(lv: Level, need: int) -> bool:
    """More rounds while the level's look does not decide and a path has fewer than `need` counted bursts
    (the last look), within its round budget (errors included); never for a level whose displaced revisits
    the tier never served. A level decided early stops: its rounds go to the levels still open."""
    if lv.source == "rounds" or (lv.attempts >= 3 and lv.hit_bursts == 0) or lv.decided:
        return False
    enough = len(lv.offload_bursts) >= need and len(lv.control_bursts) >= need
    return not enough and lv.rounds + lv.errors < round_budget(lv, need)


def _progress(stderr: TextIO | None, lv: Level, need: int, eta: str) -> None:
    if stderr is not None:
        print(
            f"load sweep c={lv.concurrency} prefix {lv.prefix_tokens}: round {lv.rounds}, counted bursts "
            f"{len(lv.offload_bursts)}/{need} offload, {len(lv.control_bursts)}/{need} {lv.control}, ETA {eta}",
            file=stderr,
            flush=True,
        )


def lengths(run: PreparedRun, wanted: Sequence[int]) -> tuple[int, ...]:
    """Prefix lengths the sweep can use: whole alignment units, prompt within max_model_len."""
    sz, limit = run.sizing, run.target.max_model_len
    out = []
    for n in wanted or (sz.prefix_tokens,):
        n = n // sz.align * sz.align
        if n >= sz.align and (limit is None or n + sz.tail_tokens < limit):
            out.append(n)
    return tuple(dict.fromkeys(out)) or (sz.prefix_tokens,)


async def run(
    run_: PreparedRun,
    req: SweepRequest,
    stderr: TextIO | None = None,
    rounds_level: Level | None = None,
    eta: Callable[[float, int], str] | None = None,
) -> list[Level]:
    """Every level until its sequential look decides or it has `min_bursts` counted bursts per path (the last
    look; round_budget); levels take turns. `rounds_level` stands for c = 1 at the rounds' prefix: the ordinary
    rounds, not re-measured."""
    e, control = run_.ctx, control_of(run_)
    design = Design.up_to(req.min_bursts, alpha=1.0 - req.per_level_confidence)
    levels = [Level(c, p, control, design=design) for p in lengths(run_, req.prefixes) for c in req.levels]
    if rounds_level is not None:
        levels = [
            rounds_level if (lv.concurrency, lv.prefix_tokens) == (1, rounds_level.prefix_tokens) else lv
            for lv in levels
        ]
    planned = sum(req.min_bursts for lv in levels if lv.source == "sweep")
    cycle, started, done = FIRST_CYCLE, e.clock(), 0
    while True:
        todo = [lv for lv in levels if _pending(lv, req.min_bursts)]
        if not todo:
            return levels
        for lv in todo:
            cycle += 1
            try:
                await _round(run_, lv, cycle)
                lv.rounds += 1
                done += 1
                e.backoff.success()
            except CycleFailed as err:
                lv.errors += 1
                lv.notes.append(f"error: {err.detail}")
                await e.sleep(e.backoff.failure(err.retry_after))
            except BudgetExhausted:
                lv.notes.append("token budget exhausted")
                return levels
            if e.state.mismatch_confirmed:
                lv.notes.append("output mismatch confirmed: the run stops (disable_offload)")
                return levels
            left = max(0, planned - done)
            per = (e.clock() - started) / max(done, 1)
            _progress(stderr, lv, req.min_bursts, eta(per, left) if eta else f"~{per * left:.0f} s")


__all__ = ["FIRST_CYCLE", "SweepRequest", "control_of", "parse_levels", "run"]

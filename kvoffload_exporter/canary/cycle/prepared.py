"""`PreparedRun`: what `prepare()` returns — the run's conditions (never missing) and its requests.

Holding the conditions here instead of as an optional engine attribute means no step of a cycle can
run before preflight: a cycle gets a PreparedRun or nothing. Every measured request goes through
`probe`: the counters before, the request, settle + flush + settle, the counters after, classify.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from kvoffload_exporter.canary.cycle import plan as planning
from kvoffload_exporter.canary.cycle.records import (
    TARGET,
    Conditions,
    ConditionsDoc,
    PhaseRecord,
    RequestRecord,
    ServerInfo,
)
from kvoffload_exporter.canary.types import Strategy
from kvoffload_exporter.canary.wire.classify import Classification, Deltas, classify
from kvoffload_exporter.canary.wire.errors import BudgetExhausted, CycleFailed
from kvoffload_exporter.canary.wire.protocol import Completion

OPTIONAL_FIELDS = ("seed", "return_token_ids")
"""Body fields a server may refuse (HTTP 400 naming the field) without the probe losing its point: the request
is sent again once without it, and the run remembers it (greedy output needs no seed; without token ids the
output check has nothing to compare and says so)."""
SEED = 0
"""The probes' sampling seed: with temperature 0 it changes nothing, but a server that samples anyway
samples the same way for every path."""

if TYPE_CHECKING:
    from kvoffload_exporter.canary.cycle.context import RunContext


@dataclass(frozen=True)
class Probe:
    """One measured request of a phase: what is sent, what it should be, whose statistics it feeds."""

    phase: str
    prompt: list[int]
    expect: str
    path: str
    role: str = TARGET
    fresh_salt: bool = False
    kv: Mapping[str, object] | None = None
    idle: float | None = None


class BurstTransport(Protocol):
    async def burst(self, base_url: str, bodies: list[dict[str, object]]) -> list[Completion]: ...


class PreparedRun:
    """A prepared engine: its conditions plus the request, flush and probe steps cycles are made of."""

    def __init__(self, ctx: RunContext, conditions: Conditions):
        self.ctx = ctx
        self.conditions = conditions
        self.sent: Counter[str] = Counter()  # prompt tokens sent per role (the seeding span's own share)
        self.refused: set[str] = set()  # OPTIONAL_FIELDS a server answered 400 to

    # The conditions' parts, for callers that print or check them.
    @property
    def target(self) -> ServerInfo:
        return self.conditions.target

    @property
    def control(self) -> ServerInfo | None:
        return self.conditions.control

    @property
    def sizing(self) -> planning.Sizing:
        return self.conditions.sizing

    @property
    def strategy(self) -> Strategy:
        return self.conditions.strategy

    def as_dict(self) -> ConditionsDoc:
        return self.conditions.as_dict()

    def tail(self, prefix: list[int]) -> list[int]:
        """A probe's prompt: the prefix plus the per-request tail."""
        return prefix + self.ctx.prompts.tail(self.sizing)

    def probe_cost(self, probes: int) -> int:
        """Tokens of `probes` probes, each with its flush request, plus the flush opening the seeding span."""
        sz = self.sizing
        return probes * (sz.prompt_tokens + planning.OUTPUT_TOKENS + sz.flush_tokens + 1) + sz.flush_tokens + 1

    def base_probes(self) -> int:
        """Seeds, GPU revisit, offload revisit and cold control, plus the optional controls and, until it
        has run, the output check's one sensitivity probe of the run."""
        e = self.ctx
        sensitivity = 1 if e.state.output.sensitive is None else 0  # once a run, in its first compared cycle
        return 4 + 1 + (1 if e.state.uses_recompute() else 0) + (1 if e.control_url else 0) + sensitivity

    def body(
        self, prompt: list[int], salt: str, kv: Mapping[str, object] | None, role: str, max_tokens: int = 1
    ) -> dict[str, object]:
        """Greedy (temperature 0, a fixed seed), token ids returned; probes generate OUTPUT_TOKENS."""
        body: dict[str, object] = {
            "model": self.conditions.server(role).model,
            "prompt": prompt,
            "max_tokens": max_tokens,
            "temperature": 0,
            "seed": SEED,
            "ignore_eos": True,
            "stream": True,
            "stream_options": {"include_usage": True},
            "return_token_ids": True,
            "cache_salt": salt,
            "request_id": f"kvoffload-canary-{self.ctx.prompts.nonce}-{self.ctx.next_request_no()}",
        }
        for name in self.refused:
            body.pop(name, None)
        if kv is not None:
            body["kv_transfer_params"] = kv
        return body

    def _refusable(self, body: dict[str, object], comp: Completion) -> str | None:
        """The optional field a 400 is about: one the server's message names (any other 400 is a refusal of
        the request itself, which retries.py confirms and reports)."""
        if comp.status != 400:
            return None
        return next((f for f in OPTIONAL_FIELDS if f in body and f in comp.detail), None)

    def _reserve(self, tokens: int) -> None:
        """The one budget check of every request: raises BudgetExhausted when `tokens` do not fit now."""
        if not self.ctx.budget.can_spend(tokens):
            raise BudgetExhausted(self.ctx.budget.seconds_until(tokens))

    def _account(
        self, cycle: int, phase: str, kind: str, role: str, prompt: list[int], fresh: bool, kv: Any, comp: Completion
    ) -> RequestRecord:
        e = self.ctx
        self.sent[role] += len(prompt)
        e.spend(comp.tokens_spent or (len(prompt) + 1 if comp.status == 200 else 0))
        rec = request_record(e.clock(), cycle, phase, kind, role, prompt, fresh, kv, comp)
        e.record_request(rec)
        return rec

    async def send(
        self,
        cycle: int,
        phase: str,
        kind: str,
        role: str,
        prompt: list[int],
        salt: str | None,
        kv: Mapping[str, object] | None = None,
    ) -> Completion:
        """One request within the budget; recorded; a failed request fails the cycle."""
        e = self.ctx
        out = planning.OUTPUT_TOKENS if kind == "probe" else 1
        self._reserve(len(prompt) + out)
        used = salt if salt is not None else e.prompts.fresh_salt(kind)
        body = self.body(prompt, used, kv, role, out)
        comp = await e.client.complete(e.url_of(role), body)
        refused = self._refusable(body, comp)
        fresh = used != e.prompts.salt  # a salt of its own (None asks for one): never hits the family's cache
        if refused is not None:  # once: the same request without the field, remembered for the run
            self._account(cycle, phase, kind, role, prompt, fresh, kv, comp)
            self.refused.add(refused)
            body = self.body(prompt, used, kv, role, out)
            comp = await e.client.complete(e.url_of(role), body)
        self._account(cycle, phase, kind, role, prompt, fresh, kv, comp)
        if comp.error is not None:
            detail = f"{phase} {kind} on {role}: {comp.error} {comp.detail}".strip()
            raise CycleFailed(
                detail, comp.retry_after, reason=comp.error, status=comp.status, said=comp.detail, role=role
            )
        return comp

    async def send_burst(
        self,
        cycle: int,
        phase: str,
        role: str,
        prompts: list[list[int]],
        salt: str,
        kv: Mapping[str, object] | None,
        max_tokens: int = 1,
    ) -> tuple[list[Completion], list[RequestRecord]]:
        """`len(prompts)` requests at once (the load sweep), through the same budget, body and records as
        `send`; a failed request fails the round."""
        e = self.ctx
        self._reserve(sum(len(p) + max_tokens for p in prompts))
        client: BurstTransport = e.client  # type: ignore[assignment]
        comps = await client.burst(e.url_of(role), [self.body(p, salt, kv, role, max_tokens) for p in prompts])
        fresh = salt != e.prompts.salt
        recs = [self._account(cycle, phase, "burst", role, p, fresh, kv, c) for p, c in zip(prompts, comps)]
        for r in recs:
            r.concurrency = len(prompts)
        bad = next((c for c in comps if c.error is not None), None)
        if bad is not None:
            for r in recs:
                r.counted = False  # a burst with a failed request is never one of its level's bursts
            detail = f"{phase} burst on {role}: {bad.error} {bad.detail}".strip()
            raise CycleFailed(
                detail, bad.retry_after, reason=bad.error or "internal", status=bad.status, said=bad.detail, role=role
            )
        return comps, recs

    async def flush(self, cycle: int, phase: str, role: str) -> int:
        """Settle, one tiny request (an engine step that reports finished stores), settle."""
        e, s = self.ctx, self.ctx.settings
        await e.sleep(s.settle)
        if not s.flush:
            return 0
        n = self.sizing.flush_tokens
        await self.send(cycle, phase, "flush", role, e.prompts.fresh(n, "flush"), None)
        await e.sleep(s.settle)
        return n

    async def probe(self, cycle: int, p: Probe) -> tuple[PhaseRecord, Classification]:
        """Counters before, the request, flush, counters after; the phase record and its class."""
        e, sz = self.ctx, self.sizing
        before = await e.scrapes.before(p.role)
        salt = None if p.fresh_salt else e.prompts.salt
        comp = await self.send(cycle, p.phase, "probe", p.role, p.prompt, salt, p.kv)
        own = len(p.prompt) + await self.flush(cycle, p.phase, p.role)
        after = await e.scrapes.scrape(p.role)
        d = Deltas.between(before, after, self.conditions.server(p.role).model)
        cls = classify(sz.prefix_tokens, comp.cached_tokens, d, own, e.state.bytes_per_token, sz.tolerance, p.expect)
        rec = PhaseRecord(
            cycle=cycle,
            phase=p.phase,
            role=p.role,
            expect=p.expect,
            path=p.path,
            counted=False,
            classification=cls.result,
            ttft_seconds=comp.ttft_token,
            ttft_first_event_seconds=comp.ttft_event,
            cached_tokens=comp.cached_tokens,
            load_bytes=d.load_bytes,
            store_bytes=d.store_bytes,
            gpu_hit_tokens=d.gpu_hits,
            external_hit_tokens=d.ext_hits,
            other_traffic_tokens=cls.others_tokens,
            loaded_units=d.other_loads,
            stored_units=d.other_stores,
            ambiguous=cls.ambiguous,
            idle_seconds=p.idle,
            note=cls.note,
            output_token_ids=list(comp.token_ids) or None,
        )
        e.progress("phase", rec)
        return rec, cls

    async def displace(self, cycle: int) -> PhaseRecord:
        """Filler prompts, each with its own fresh salt, totalling more than the GPU cache."""
        e, sz = self.ctx, self.sizing
        before = await e.scrapes.before(TARGET)
        own = 0
        for _ in range(sz.filler_count):
            prompt = e.prompts.fresh(sz.filler_tokens, "filler")
            await self.send(cycle, "displace", "filler", TARGET, prompt, None)
            own += len(prompt)
        own += await self.flush(cycle, "displace", TARGET)
        after = await e.scrapes.scrape(TARGET)
        d = Deltas.between(before, after, self.target.model)
        rec = PhaseRecord(
            cycle=cycle,
            phase="displace",
            role=TARGET,
            expect="miss",
            path="displace",
            counted=False,
            classification=None,
            ttft_seconds=None,
            ttft_first_event_seconds=None,
            cached_tokens=None,
            load_bytes=d.load_bytes,
            store_bytes=d.store_bytes,
            gpu_hit_tokens=d.gpu_hits,
            external_hit_tokens=d.ext_hits,
            other_traffic_tokens=d.others(own),
            loaded_units=d.other_loads,
            stored_units=d.other_stores,
        )
        e.progress("phase", rec)
        return rec


def request_record(
    t: float,
    cycle: int,
    phase: str,
    kind: str,
    role: str,
    prompt: list[int],
    fresh: bool,
    kv: Mapping[str, object] | None,
    comp: Completion,
) -> RequestRecord:
    return RequestRecord(
        t=t,
        cycle=cycle,
        phase=phase,
        kind=kind,
        role=role,
        prompt_tokens=len(prompt),
        salt="fresh" if fresh else "family",
        kv_transfer_params=kv,
        status=comp.status,
        error=comp.error,
        detail=comp.detail,
        ttft_first_event_seconds=comp.ttft_event,
        ttft_seconds=comp.ttft_token,
        total_seconds=comp.total,
        cached_tokens=comp.cached_tokens,
        usage=comp.usage,
        server_metrics=comp.server_metrics,
    )

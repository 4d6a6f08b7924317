"""`check`'s early stop on a misconfigured tier: the exporter's own state and reason over the run so far, the
tier's size and the failures it counted, turned into the fix; pure.

Why: more rounds cannot measure a tier that never stores (allocation failures: a tier smaller than one
prefix; stores skipped or dropped; a connector that stores nothing) or never loads what it stored (a lookup
that always misses). On an H200 (vLLM 0.26, a 300 MB tier under 587 MB prefixes) the exporter said
`not_storing` / `stores_dropped` with 258 allocation failures while `check` spent its whole run and advised
measuring longer. So after REVISITS displaced revisits without an offload hit, on a target that never served
one, the run stops and names the reason in the exporter's vocabulary (derive/reasons.py), with the fix.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from kvoffload_exporter.canary.check.advice import Action
from kvoffload_exporter.canary.cycle.records import CycleRecord
from kvoffload_exporter.canary.types import CycleReason
from kvoffload_exporter.derive.capacity import kv_bytes_per_token, tier_bytes
from kvoffload_exporter.derive.reasons import HINTS, STORE_DROPS, CanaryFacts, explain
from kvoffload_exporter.derive.window import interval
from kvoffload_exporter.enums import Signal, State, StateReason
from kvoffload_exporter.ingest.backends.schema import DropReason, Evidence
from kvoffload_exporter.ingest.snapshot import Snapshot

REVISITS = 3
"""Displaced revisits without an offload hit that settle it (as many as the verdict `no_offload_hit` needs)."""

GROW = frozenset(
    {
        StateReason.TIER_SMALLER_THAN_PREFIX,
        StateReason.STORES_DROPPED,
        StateReason.STORES_SKIPPED,
        StateReason.TIER_SMALLER_THAN_GPU_POOL,
        StateReason.EVICTED_BEFORE_REUSE,
    }
)
"""Reasons a larger tier fixes; every other reason (or none) points at the connector's configuration."""


@dataclass(frozen=True)
class Facts:
    """What the exporter says about the canary's engines between the first scrape and the last one."""

    state: str | None = None
    reason: str | None = None
    tier_bytes: float | None = None
    kv_bytes_per_token: float | None = None
    allocation_failures: float = 0.0
    stores_dropped: float = 0.0  # dropped for a full tier or backpressure (backends that say so)
    stores_skipped: float = 0.0
    store_bytes: float = 0.0
    load_bytes: float = 0.0
    prompt_tokens: float = 0.0


@dataclass(frozen=True)
class Failure:
    """A tier the run stopped on: what the canary saw, what the exporter says, the fix."""

    seen: str  # "not_storing": the seeds stored nothing; "no_load": stored, never loaded
    revisits: int
    facts: Facts
    prefix_tokens: int
    action: Action
    why: str

    @property
    def prefix_bytes(self) -> float | None:
        per = self.facts.kv_bytes_per_token
        return per * self.prefix_tokens if per else None

    def as_dict(self) -> dict[str, object]:
        f = self.facts
        return {
            "seen": self.seen,
            "displaced_revisits": self.revisits,
            "state": f.state,
            "state_reason": f.reason,
            "tier_bytes": f.tier_bytes,
            "prefix_tokens": self.prefix_tokens,
            "prefix_bytes": self.prefix_bytes,
            "allocation_failures": f.allocation_failures,
            "stores_dropped": f.stores_dropped,
            "stores_skipped": f.stores_skipped,
            "store_bytes": f.store_bytes,
            "load_bytes": f.load_bytes,
            "prompt_tokens": f.prompt_tokens,
            "action": str(self.action),
            "why": self.why,
        }


def facts(
    first: Snapshot | None, last: Snapshot | None, model: str, canary: CanaryFacts, seen: str, bpt: float | None
) -> Facts:
    """The exporter's state and reason over the run (summed over the model's engines; the first reason wins).
    When the canary saw its own stores go unloaded, its seeds are the stores "before" and its revisits the
    reuse that `store_without_load` asks for, which a window opened at an idle server cannot show itself."""
    if last is None:
        return Facts()
    derived = interval(first, last)
    engines = [e for e in last.engines if e.model_name == model]
    state = reason = None
    tier = per = None
    sums = dict.fromkeys(("alloc", "dropped", "skipped", "stored", "loaded", "prompts"), 0.0)
    for e in engines:
        d = derived[e.key]
        if seen == "no_load" and d.state == State.STORING:
            d = replace(d, state=State.STORE_WITHOUT_LOAD)
        why = explain(d, e, last.families, canary, tier_bytes(e, None))
        if state is None or (reason is None and why is not None):
            state, reason = str(d.state), (str(why) if why is not None else None)
        t = tier_bytes(e, None)
        tier = t if tier is None else (tier + t if t is not None else tier)
        per = per or kv_bytes_per_token(e)
        drops = {k.reason: v for k, v in d.evidence.items() if k.signal == Evidence.DROPPED and k.reason in STORE_DROPS}
        alloc = drops.pop(DropReason.ALLOCATION_FAILURE, 0.0)  # the backend's count of the same failures
        sums["alloc"] += max(alloc, d.deltas.get(Signal.OFFLOAD_ALLOCATION_FAILURES, 0.0))
        sums["dropped"] += sum(drops.values())
        for key, sig in (
            ("skipped", Signal.OFFLOAD_STORES_SKIPPED),
            ("stored", Signal.OFFLOAD_STORE_BYTES),
            ("loaded", Signal.OFFLOAD_LOAD_BYTES),
            ("prompts", Signal.PROMPT_TOKENS),
        ):
            sums[key] += d.deltas.get(sig, 0.0)
    return Facts(
        state,
        reason,
        tier,
        per or bpt,
        sums["alloc"],
        sums["dropped"],
        sums["skipped"],
        sums["stored"],
        sums["loaded"],
        sums["prompts"],
    )


def _mb(v: float) -> str:
    return f"{v / 1e6:,.1f} MB"


def _why(seen: str, revisits: int, f: Facts, prefix_tokens: int, prefix_bytes: float | None) -> str:
    what = (
        f"the tier stored nothing in {revisits} rounds and served none of their displaced revisits"
        if seen == "not_storing"
        else f"the tier stored the prefix but served none of {revisits} displaced revisits"
    )
    said = f"the exporter says {f.state or 'no state'}"
    if f.reason:
        said += f", why: {f.reason} - {HINTS.get(StateReason(f.reason), '')}".rstrip(" -")
    tier = f"tier {_mb(f.tier_bytes)}" if f.tier_bytes is not None else "tier size not exported (vLLM < 0.33)"
    prefix = f"{prefix_tokens:,}-token prefix" + (f" of {_mb(prefix_bytes)}" if prefix_bytes else "")
    counted = (
        f"{f.allocation_failures:,.0f} allocation failures, {f.stores_dropped:,.0f} stores dropped, "
        f"{f.stores_skipped:,.0f} skipped, "
        f"{_mb(f.store_bytes)} stored, {_mb(f.load_bytes)} loaded over {f.prompt_tokens:,.0f} prompt tokens"
    )
    return f"{what}: {said}; {tier} against the canary's {prefix}; over the run: {counted}"


def _action(seen: str, f: Facts, prefix_bytes: float | None) -> Action:
    if f.reason in GROW:
        return Action.GROW_TIER
    if seen == "not_storing" and f.tier_bytes is not None and prefix_bytes and f.tier_bytes < prefix_bytes:
        return Action.GROW_TIER  # no reason counted it, but the sizes say it
    return Action.CHECK_CONNECTOR


FIXES = {
    Action.GROW_TIER: "grow the CPU tier above the prefixes it must hold (and the GPU pool), or remove it",
    Action.CHECK_CONNECTOR: "check the offload connector's configuration (kv_transfer_config, its backend and "
    "store policy, hybrid KV groups): stores or lookups fail without a size problem",
}


def config_failure(
    first: Snapshot | None,
    last: Snapshot | None,
    model: str,
    cycles: Sequence[CycleRecord],
    canary: CanaryFacts,
    hits_seen: int,
    prefix_tokens: int,
    bytes_per_token: float | None = None,
) -> Failure | None:
    """The failure to stop on, or None: the target never served an offload hit and REVISITS displaced
    revisits found the prefix unstored (`no_store`) or unloaded (`no_load`)."""
    no_store = sum(1 for c in cycles if c.reason == CycleReason.NO_STORE)
    no_load = sum(1 for c in cycles if c.reason == CycleReason.NO_LOAD)
    if hits_seen or no_store + no_load < REVISITS:
        return None
    seen = "not_storing" if no_store >= no_load else "no_load"
    f = facts(first, last, model, canary, seen, bytes_per_token)
    per = f.kv_bytes_per_token
    prefix_bytes = per * prefix_tokens if per else None
    action = _action(seen, f, prefix_bytes)
    why = f"{_why(seen, no_store + no_load, f, prefix_tokens, prefix_bytes)}. {FIXES[action]}"
    return Failure(seen, no_store + no_load, f, prefix_tokens, action, why)


__all__ = ["FIXES", "GROW", "REVISITS", "Facts", "Failure", "config_failure", "facts"]

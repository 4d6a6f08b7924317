"""Why an engine stores and never loads (or loads but loses stores): one closed `StateReason` per engine.

Pure: inputs are the windowed `EngineDerived`, the engine's newest `EngineSignals` (cumulative counters,
`cache_config_info`, `kv_offload_config_info`), the families the scrape carried and optional canary facts;
the output is a reason or None (nothing needs explaining). One rule per reason, checked in `StateReason`
order: the first that holds wins, so a missing metric is never mistaken for a workload property and the
cheapest fix (wait, enlarge the tier) is named before the diagnosis that needs the canary.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from kvoffload_exporter.derive.capacity import chunk_tokens, gpu_pool_tokens, kv_bytes_per_token, tier_tokens
from kvoffload_exporter.derive.window import EngineDerived, computed_tokens
from kvoffload_exporter.enums import Signal, State, StateReason
from kvoffload_exporter.ingest.backends.schema import DropReason, Evidence
from kvoffload_exporter.ingest.exposition import info_number
from kvoffload_exporter.ingest.families import Vllm
from kvoffload_exporter.ingest.snapshot import EngineSignals

NO_REUSE_HIT_RATIO = 0.05
"""GPU prefix hit ratio below which reuse is incidental: the workload has (almost) no repeated prefix."""

FULL_INFLIGHT = 0.99
"""Share of tier chunks pinned by in-flight transfers at which new stores back-pressure (tier full)."""

SKIPPED_QUERY_SHARE = 0.5
"""Below this share of prompt tokens looked up in the prefix cache, requests skip reading the cache."""

STORE_DROPS = frozenset({DropReason.CPU_FULL, DropReason.ALLOCATION_FAILURE, DropReason.STORE_ERROR})
"""Backend drop reasons that mean the tier lost a store it was offered (not a request that went away).
Tiering backpressure is not one: it drops cascades from the primary to a secondary tier (vLLM 0.34.0
tiering/manager.py:1010-1015), never the GPU -> primary store, so the state follows the primary tier and
the dashboard says the secondary tier falls behind."""

PRIMARY_TIERS = frozenset({"", "0:primary"})
"""Tier labels of the tier the GPU stores into (a tiering spec's secondary tiers are "1:fs", "2:p2p", ...)."""

_LOAD_FAMILY, _STORE_FAMILY = Vllm.KV_OFFLOAD_LOAD_BYTES, Vllm.KV_OFFLOAD_STORE_BYTES
_EXT_QUERIES, _EXT_HITS = Vllm.EXTERNAL_PREFIX_CACHE_QUERIES, Vllm.EXTERNAL_PREFIX_CACHE_HITS


@dataclass(frozen=True)
class CanaryFacts:
    """What the canary learnt about the target (canary/cycle/state.py), or nothing when it does not run."""

    no_load_cycles: int = 0  # displaced revisits that loaded nothing, target never loaded (CycleReason.NO_LOAD)
    evicted_from_tier_cycles: int = 0  # displaced revisits that missed although the target loaded before
    retention_seconds: float | None = None  # longest idle time still loaded from the tier (wait ladder)


@dataclass(frozen=True)
class Inputs:
    d: EngineDerived
    e: EngineSignals
    families: frozenset[str]
    canary: CanaryFacts | None
    tier_bytes: float | None = None  # exported, else the target's `tier_bytes` setting

    def delta(self, s: Signal) -> float:
        return self.d.deltas.get(s, 0.0)


def _metric_missing(i: Inputs) -> bool:
    """Stores are exported but the load (or external-hit) family is not there at all (dynamo #4549)."""
    f = i.families
    return (_STORE_FAMILY in f and _LOAD_FAMILY not in f) or (_EXT_QUERIES in f and _EXT_HITS not in f)


def _warming_up(i: Inputs) -> bool:
    """Fewer prompt tokens since the engine started than the GPU pool holds: nothing stored can have been
    evicted from the GPU yet, so no load is possible (store-on-compute: the tier is a superset of HBM)."""
    pool = gpu_pool_tokens(i.e)
    prompts = i.e.counters.get(Signal.PROMPT_TOKENS)
    return pool is not None and prompts is not None and prompts < pool


def _dropped(i: Inputs) -> bool:
    """Allocation failures, a backend's own drops (tiering backpressure, a full CPU tier), or every chunk
    pinned by in-flight transfers (backpressure)."""
    if i.delta(Signal.OFFLOAD_ALLOCATION_FAILURES) > 0:
        return True
    if any(v > 0 for k, v in i.d.evidence.items() if k.signal == Evidence.DROPPED and k.reason in STORE_DROPS):
        return True
    return (i.e.offload_inflight or 0.0) >= FULL_INFLIGHT


def _stores_dropped(i: Inputs) -> bool:
    """Dropped stores (`_dropped`) or stores skipped: the tier loses blocks it was offered."""
    return _dropped(i) or i.delta(Signal.OFFLOAD_STORES_SKIPPED) > 0


def _store_errors(i: Inputs) -> bool:
    """The store answered puts with errors (Mooncake store `save_put` `error` or `partial_failure`): in a
    `not_storing` window no put fully succeeded, so every put failed at the store, not for want of space."""
    return any(
        v > 0 for k, v in i.d.evidence.items() if k.signal == Evidence.DROPPED and k.reason == DropReason.STORE_ERROR
    )


def _stores_skipped(i: Inputs) -> bool:
    """The connector counted stores it skipped (vllm:kv_offload_stores_skipped)."""
    return i.delta(Signal.OFFLOAD_STORES_SKIPPED) > 0


def _store_metric_missing(i: Inputs) -> bool:
    """No store counter at all (no offload store family, no backend store series): stores go unseen."""
    return Signal.OFFLOAD_STORE_BYTES not in i.e.counters and not any(k.signal == Evidence.STORED for k in i.e.evidence)


def _tier_smaller_than_prefix(i: Inputs) -> bool:
    """The tier's bytes are below the KV bytes of the typical computed prompt (window mean per request):
    a store that cannot fit is never made, so nothing is ever stored (H200: a 300 MB tier under
    5,120-token prefixes of 587 MB)."""
    per_token, requests = kv_bytes_per_token(i.e), i.d.ttft_count
    computed = computed_tokens(i.d.deltas, i.d.by_source)
    if not i.tier_bytes or per_token is None or not computed or requests <= 0:
        return False
    return i.tier_bytes < computed / requests * per_token


def _tier_smaller(i: Inputs) -> bool:
    """A prefix leaves the GPU before it leaves a tier larger than the pool; a smaller tier has already
    evicted it (vllm#56871: 3.3 M tier tokens under a 5.29 M-token GPU pool)."""
    tier, pool = tier_tokens(i.e), gpu_pool_tokens(i.e)
    return tier is not None and pool is not None and tier < pool


def _prefix_short(i: Inputs) -> bool:
    """The reused prefix per request is shorter than one tier chunk: the GPU matches 16-token blocks, the
    tier only whole chunks (vllm#54607)."""
    chunk, n = chunk_tokens(i.e), i.d.ttft_count
    if chunk is None or n <= 0 or chunk <= (info_number(i.e.cache_config.get("block_size")) or 0.0):
        return False
    return i.delta(Signal.GPU_PREFIX_HITS) / n < chunk


def _loads_skipped(i: Inputs) -> bool:
    """Prompt tokens grew but (almost) none were looked up: requests skip reading the cache (prompt
    logprobs, `max_load_tokens: 0`; vllm#57596)."""
    prompts = i.delta(Signal.PROMPT_TOKENS)
    queries = i.d.deltas.get(Signal.GPU_PREFIX_QUERIES)
    return prompts > 0 and queries is not None and queries < SKIPPED_QUERY_SHARE * prompts


def _evicted_before_reuse(i: Inputs) -> bool:
    """The canary's wait ladder saw its prefix leave the tier before its revisit."""
    return i.canary is not None and i.canary.evicted_from_tier_cycles > 0


def _lookup_misses(i: Inputs) -> bool:
    """The tier is asked (external queries grow) and never answers; with the canary: a displaced prefix
    that was stored was not loaded on revisit (vllm#47890 hybrid KV groups, #53498 SimpleCPU)."""
    if i.canary is not None and i.canary.no_load_cycles > 0:
        return True
    return (
        i.delta(Signal.EXTERNAL_PREFIX_QUERIES) > 0 and i.delta(Signal.EXTERNAL_PREFIX_HITS) <= 0 and not _no_reuse(i)
    )


def _moved(i: Inputs, signal: Evidence, secondary: bool = False) -> bool:
    return any(
        v > 0 for k, v in i.d.evidence.items() if k.signal == signal and (not secondary or k.tier not in PRIMARY_TIERS)
    )


def _promotion_failures(i: Inputs) -> bool:
    """A secondary tier finds the chunks (its chunk hits grow) but their promotions into the primary tier
    fail (failed promotion jobs, or the primary could not allocate), and nothing is loaded from it (vLLM 0.34.0
    tiering/spec.py:184-217): the tier holds the prefix and cannot serve it."""
    failed = _moved(i, Evidence.PROMOTION_FAILED) or any(
        v > 0
        for k, v in i.d.evidence.items()
        if k.signal == Evidence.DROPPED and k.reason == DropReason.PROMOTION_ALLOCATION_FAILURE
    )
    return failed and _moved(i, Evidence.HITS, secondary=True)


def _load_errors(i: Inputs) -> bool:
    """Lookups find the keys (external queries and hits grow) but the gets fail (Mooncake store load_get
    `error` or `partial_failure`) while stores succeed: the store holds the prefix and the loads break."""
    return (
        _moved(i, Evidence.LOAD_FAILED)
        and i.delta(Signal.EXTERNAL_PREFIX_HITS) > 0
        and i.delta(Signal.EXTERNAL_PREFIX_QUERIES) > 0
        and _moved(i, Evidence.STORED)
    )


def _served_elsewhere(i: Inputs) -> bool:
    """External prefix hits grew while this tier loaded nothing: another connector served them (a
    MultiConnector's other child, such as a shared store without metrics), and this tier stores for nothing."""
    return i.delta(Signal.EXTERNAL_PREFIX_HITS) > 0


def _no_reuse(i: Inputs) -> bool:
    """Reuse is incidental: the GPU hit ratio is below NO_REUSE_HIT_RATIO and nothing came from outside."""
    ratio = i.d.gpu_hit_ratio
    return ratio is not None and ratio < NO_REUSE_HIT_RATIO and i.delta(Signal.EXTERNAL_PREFIX_HITS) <= 0


Rules = tuple[tuple[StateReason, Callable[[Inputs], bool]], ...]

RULES: Rules = (
    (StateReason.METRIC_MISSING, _metric_missing),
    (StateReason.WARMING_UP, _warming_up),
    (StateReason.STORES_DROPPED, _stores_dropped),
    (StateReason.PROMOTION_FAILURES, _promotion_failures),
    (StateReason.LOAD_ERRORS, _load_errors),
    (StateReason.TIER_SMALLER_THAN_GPU_POOL, _tier_smaller),
    (StateReason.PREFIX_SHORTER_THAN_BLOCK, _prefix_short),
    (StateReason.LOADS_SKIPPED_BY_REQUEST, _loads_skipped),
    (StateReason.EVICTED_BEFORE_REUSE, _evicted_before_reuse),
    (StateReason.NO_REUSE_IN_WORKLOAD, _no_reuse),
    (StateReason.LOOKUP_ALWAYS_MISSES, _lookup_misses),
    (StateReason.SERVED_BY_ANOTHER_CONNECTOR, _served_elsewhere),
)
"""The reasons of `store_without_load`, in the order they are tried."""

NOT_STORING_RULES: Rules = (
    (StateReason.METRIC_MISSING, _store_metric_missing),
    (StateReason.STORE_ERRORS, _store_errors),
    (StateReason.TIER_SMALLER_THAN_PREFIX, _tier_smaller_than_prefix),
    (StateReason.STORES_SKIPPED, _stores_skipped),
    (StateReason.STORES_DROPPED, _dropped),
)
"""The reasons of `not_storing`: an unseen store first, then puts the store refused (an error it names is
the cause, whatever the size), the tier's size (the cause) before its symptoms."""

RULES_BY_STATE: dict[State, Rules] = {State.STORE_WITHOUT_LOAD: RULES, State.NOT_STORING: NOT_STORING_RULES}


HINTS: dict[StateReason, str] = {
    StateReason.METRIC_MISSING: "the load or external-hit family is not exported: loads may happen unseen; "
    "check the vLLM/connector version before concluding anything",
    StateReason.WARMING_UP: "fewer prompt tokens since start than the GPU pool holds: nothing stored has "
    "left the GPU yet, wait",
    StateReason.TIER_SMALLER_THAN_PREFIX: "the tier is smaller than the KV bytes of a typical computed prompt: "
    "no prompt fits, so nothing is ever stored; make the tier larger than a prompt or disable it",
    StateReason.STORES_SKIPPED: "the connector skips the stores it is offered (vllm:kv_offload_stores_skipped): "
    "check the tier size and the store policy",
    StateReason.STORE_ERRORS: "every put of the window failed at the store, whole or in part (Mooncake store "
    "save_put error or partial_failure): "
    "nothing is stored; check the store's master, segments and transfer engine, not the tier size",
    StateReason.STORES_DROPPED: "allocation failures, skipped or dropped stores (a full tier, store errors), or a "
    "tier pinned by in-flight transfers: the tier loses blocks; enlarge it or lower the store rate",
    StateReason.TIER_SMALLER_THAN_GPU_POOL: "the tier holds fewer tokens than the GPU pool, so a prefix "
    "evicted from the GPU is already gone from the tier; make it larger than the pool or disable it",
    StateReason.PREFIX_SHORTER_THAN_BLOCK: "the prefix reused per request is shorter than one offload chunk: "
    "the tier only matches whole chunks; use a smaller chunk (block) size",
    StateReason.LOADS_SKIPPED_BY_REQUEST: "most prompt tokens are never looked up: requests skip reading "
    "the cache (prompt logprobs, max_load_tokens 0)",
    StateReason.EVICTED_BEFORE_REUSE: "the canary's prefix left the tier before its revisit: reuse comes "
    "later than the tier's retention (kvoffload_tier_retention_seconds)",
    StateReason.LOOKUP_ALWAYS_MISSES: "the tier is asked and never hits: the load path is broken "
    "(hybrid KV groups vllm#47890, SimpleCPU #53498); run check",
    StateReason.SERVED_BY_ANOTHER_CONNECTOR: "external prefix hits grew while this tier loaded nothing: "
    "another connector served them (MultiConnector's other child); this tier stores for nothing: remove it or "
    "make it the one that serves",
    StateReason.PROMOTION_FAILURES: "a secondary tier finds the chunks but promoting them into the primary tier "
    "fails (kvoffload_tier_promotion_failures_total, promotion allocation failures): check that tier's I/O, "
    "its peers or files, and the primary tier's free space; a larger secondary tier does not help",
    StateReason.LOAD_ERRORS: "lookups find the keys but the store's gets fail (Mooncake store load_get error or "
    "partial_failure) while puts succeed: the prefix is recomputed; check the store's segments and transfer "
    "engine, not the tier size",
    StateReason.NO_REUSE_IN_WORKLOAD: "GPU prefix hit ratio below 5 %: the workload barely repeats prefixes; "
    "set store_threshold >= 2 or disable offload",
}
"""One line per reason: what it means and what to do (inspect's text; the runbook has the long form)."""


def explain(
    d: EngineDerived,
    e: EngineSignals,
    families: frozenset[str],
    canary: CanaryFacts | None = None,
    tier_bytes: float | None = None,
) -> StateReason | None:
    """The reason for a `store_without_load` or `not_storing` state, or `stores_dropped` for a degraded
    `hit`; else None. `tier_bytes`: the tier's known size (exported, else configured)."""
    i = Inputs(d, e, families, canary, tier_bytes)
    if not d.state_known:  # a source's series are missing: nothing is explained from half the evidence
        return None
    if d.state == State.HIT:
        # The engine loads: the only thing to explain is a tier that is losing stores.
        return StateReason.STORES_DROPPED if _stores_dropped(i) else None
    # None when no rule holds: an unexplained state is said as such, never guessed.
    return next((reason for reason, rule in RULES_BY_STATE.get(d.state, ()) if rule(i)), None)


__all__ = [
    "HINTS",
    "NOT_STORING_RULES",
    "RULES",
    "RULES_BY_STATE",
    "CanaryFacts",
    "chunk_tokens",
    "explain",
    "gpu_pool_tokens",
    "tier_tokens",
]

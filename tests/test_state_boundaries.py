"""Each threshold of the evidence state and of the "external queries without hits" reason, pinned on
both sides of its boundary.

Why: a mutation of reasons.py's "external queries without hits" branch survived the whole suite (every
fixture chain that reaches it also satisfies the canary branch or an earlier rule), and no test held
the state thresholds of derive (chunk, MIN_PREFILL_TOKENS, "> 0" on loads and stores) at their edge.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from kvoffload_exporter.derive.reasons import NO_REUSE_HIT_RATIO, CanaryFacts, explain
from kvoffload_exporter.derive.window import MIN_PREFILL_TOKENS, EngineDerived, evidence_state
from kvoffload_exporter.enums import Signal, State, StateReason
from kvoffload_exporter.ingest.backends.schema import Evidence, EvidenceKey, NativeUnit
from kvoffload_exporter.ingest.families import Vllm
from kvoffload_exporter.ingest.snapshot import EngineSignals

S = Signal
CHUNK = 2048.0  # tokens per offload chunk, above MIN_PREFILL_TOKENS


def state(deltas: dict[Signal, float], *, chunk: float | None = None, stored_before: bool = True) -> State:
    return evidence_state(True, deltas, {}, stored_before, {}, chunk)


# --- derive: not_storing needs more computed tokens than max(chunk, MIN_PREFILL_TOKENS) ---


@pytest.mark.parametrize(
    ("computed", "chunk", "want"),
    [
        (MIN_PREFILL_TOKENS, None, State.IDLE),  # at the floor: a few requests' fixed steps
        (MIN_PREFILL_TOKENS + 1, None, State.NOT_STORING),
        (MIN_PREFILL_TOKENS + 1, CHUNK, State.IDLE),  # above the floor, not above one chunk
        (CHUNK, CHUNK, State.IDLE),  # exactly one chunk: a store may not be due yet
        (CHUNK + 1, CHUNK, State.NOT_STORING),
        (MIN_PREFILL_TOKENS + 1, 16.0, State.NOT_STORING),  # a chunk below the floor: the floor holds
        (MIN_PREFILL_TOKENS, 16.0, State.IDLE),
    ],
)
def test_not_storing_threshold(computed: float, chunk: float | None, want: State) -> None:
    deltas = {S.OFFLOAD_LOAD_BYTES: 0.0, S.OFFLOAD_STORE_BYTES: 0.0, S.PREFILL_COMPUTED_TOKENS: computed}
    assert state(deltas, chunk=chunk) == want


def test_computed_tokens_fall_back_to_prompts_less_hits_at_the_same_threshold() -> None:
    base = {S.OFFLOAD_STORE_BYTES: 0.0, S.GPU_PREFIX_HITS: 1000.0, S.EXTERNAL_PREFIX_HITS: 0.0}
    assert state({**base, S.PROMPT_TOKENS: 1000.0 + MIN_PREFILL_TOKENS}) == State.IDLE
    assert state({**base, S.PROMPT_TOKENS: 1000.0 + MIN_PREFILL_TOKENS + 1}) == State.NOT_STORING


@pytest.mark.parametrize(
    ("load", "store", "want"),
    [
        (0.0, 0.0, State.IDLE),
        (1.0, 0.0, State.HIT),  # one loaded byte is a hit
        (0.0, 1.0, State.STORE_WITHOUT_LOAD),  # one stored byte with reuse and older stores
        (1.0, 1.0, State.HIT),
    ],
)
def test_loads_and_stores_count_from_the_first_byte(load: float, store: float, want: State) -> None:
    deltas = {S.OFFLOAD_LOAD_BYTES: load, S.OFFLOAD_STORE_BYTES: store, S.GPU_PREFIX_HITS: 16.0}
    assert state(deltas) == want


@pytest.mark.parametrize("unit", [NativeUnit.BLOCKS, NativeUnit.TOKENS, NativeUnit.CHUNKS])
def test_backend_evidence_in_any_unit_counts_from_one(unit: NativeUnit) -> None:
    stored = {EvidenceKey(Evidence.STORED, unit): 1.0}
    loaded = {**stored, EvidenceKey(Evidence.LOADED, unit): 1.0}
    reuse = {S.GPU_PREFIX_HITS: 16.0}
    assert evidence_state(True, reuse, {}, True, stored) == State.STORE_WITHOUT_LOAD
    assert evidence_state(True, reuse, {}, True, loaded) == State.HIT
    assert evidence_state(True, reuse, {}, True, {EvidenceKey(Evidence.STORED, unit): 0.0}) == State.IDLE


@pytest.mark.parametrize(
    ("reuse", "stored_before", "want"),
    [
        ({S.GPU_PREFIX_HITS: 0.0}, True, State.STORING),
        ({S.GPU_PREFIX_HITS: 1.0}, True, State.STORE_WITHOUT_LOAD),
        ({S.EXTERNAL_PREFIX_HITS: 1.0}, True, State.STORE_WITHOUT_LOAD),
        ({S.GPU_PREFIX_HITS: 1.0}, False, State.STORING),  # the tier is still filling (warm-up)
    ],
)
def test_store_without_load_needs_reuse_and_older_stores(
    reuse: dict[Signal, float], stored_before: bool, want: State
) -> None:
    assert state({S.OFFLOAD_STORE_BYTES: 100.0, **reuse}, stored_before=stored_before) == want


def test_cache_hit_sources_count_as_reuse_from_one_token() -> None:
    deltas = {S.OFFLOAD_STORE_BYTES: 100.0}
    for source in ("local_cache_hit", "external_kv_transfer"):
        assert evidence_state(True, deltas, {source: 1.0}) == State.STORE_WITHOUT_LOAD
        assert evidence_state(True, deltas, {source: 0.0}) == State.STORING
    assert evidence_state(True, deltas, {"local_compute": 1e6}) == State.STORING


def test_not_configured_wins_over_everything() -> None:
    assert evidence_state(False, {S.OFFLOAD_LOAD_BYTES: 1e9}, {}) == State.NOT_CONFIGURED


# --- reasons: "external queries without hits" (lookup_always_misses from the counters alone) ---

FAMILIES = frozenset(
    {
        Vllm.KV_OFFLOAD_LOAD_BYTES,
        Vllm.KV_OFFLOAD_STORE_BYTES,
        Vllm.EXTERNAL_PREFIX_CACHE_QUERIES,
        Vllm.EXTERNAL_PREFIX_CACHE_HITS,
    }
)


def store_without_load(queries: float, hits: float, gpu_ratio: float | None = 0.5) -> EngineDerived:
    deltas = {
        S.OFFLOAD_LOAD_BYTES: 0.0,
        S.OFFLOAD_STORE_BYTES: 1e9,
        S.EXTERNAL_PREFIX_QUERIES: queries,
        S.EXTERNAL_PREFIX_HITS: hits,
    }
    return EngineDerived(
        key=("m", "0"),
        configured=True,
        window_seconds=60.0,
        deltas=deltas,
        by_source={},
        state=State.STORE_WITHOUT_LOAD,
        gpu_hit_ratio=gpu_ratio,
    )


ENGINE = EngineSignals(model_name="m", engine="0", counters={S.OFFLOAD_STORE_BYTES: 1e9})
"""No pool, tier or chunk facts: every earlier rule of store_without_load stays silent."""


@pytest.mark.parametrize(
    ("queries", "hits", "want"),
    [
        (1.0, 0.0, StateReason.LOOKUP_ALWAYS_MISSES),  # asked once, never answered
        (1e6, 0.0, StateReason.LOOKUP_ALWAYS_MISSES),
        (0.0, 0.0, None),  # never asked: nothing says the lookup is broken
        (1e6, 1.0, StateReason.SERVED_BY_ANOTHER_CONNECTOR),  # hits, no load of this tier: served elsewhere
        (0.0, 1.0, StateReason.SERVED_BY_ANOTHER_CONNECTOR),
    ],
)
def test_external_queries_without_hits_is_lookup_always_misses(queries: float, hits: float, want: object) -> None:
    assert explain(store_without_load(queries, hits), ENGINE, FAMILIES) == want


def test_external_queries_without_hits_is_no_reuse_when_the_gpu_barely_hits() -> None:
    """Below NO_REUSE_HIT_RATIO the workload explains the missing loads, not the lookup path."""
    below = store_without_load(1e6, 0.0, gpu_ratio=NO_REUSE_HIT_RATIO - 1e-9)
    at = store_without_load(1e6, 0.0, gpu_ratio=NO_REUSE_HIT_RATIO)
    assert explain(below, ENGINE, FAMILIES) == StateReason.NO_REUSE_IN_WORKLOAD
    assert explain(at, ENGINE, FAMILIES) == StateReason.LOOKUP_ALWAYS_MISSES


def test_a_canary_revisit_that_never_loaded_is_lookup_always_misses_without_any_query() -> None:
    d = store_without_load(0.0, 0.0)
    assert explain(d, ENGINE, FAMILIES, CanaryFacts(no_load_cycles=1)) == StateReason.LOOKUP_ALWAYS_MISSES
    assert explain(d, ENGINE, FAMILIES, CanaryFacts(no_load_cycles=0)) is None


# --- reasons: metric_missing, each half on its own ---


@pytest.mark.parametrize(
    ("absent", "want"),
    [
        (Vllm.KV_OFFLOAD_LOAD_BYTES, StateReason.METRIC_MISSING),  # stores exported, loads not
        (Vllm.EXTERNAL_PREFIX_CACHE_HITS, StateReason.METRIC_MISSING),  # queries exported, hits not
        (Vllm.EXTERNAL_PREFIX_CACHE_QUERIES, StateReason.LOOKUP_ALWAYS_MISSES),  # hits without queries: complete
    ],
)
def test_a_missing_load_or_external_hit_family_is_metric_missing(absent: str, want: StateReason) -> None:
    """Why: the external-queries half of `_metric_missing` could be removed with every test green (the
    fixture chain only leaves out the load family). Queries that grow and a hits family that is not
    exported say nothing about the lookup: the hits may happen unseen."""
    assert explain(store_without_load(1e6, 0.0), ENGINE, FAMILIES - {absent}) == want


def test_the_anchor_is_read_only_when_reuse_makes_it_decide() -> None:
    """`stored_before` as a callable (compare passes one: it reads a packed point) is asked only for a
    storing engine with reuse, never for a hit, idle or a store without reuse; and it decides there."""
    asked: list[bool] = []

    def before(answer: bool) -> Callable[[], bool]:
        def ask() -> bool:
            asked.append(answer)
            return answer

        return ask

    hit = {S.OFFLOAD_LOAD_BYTES: 1.0, S.OFFLOAD_STORE_BYTES: 1.0, S.GPU_PREFIX_HITS: 1.0}
    assert evidence_state(True, hit, {}, before(True), {}, CHUNK) == State.HIT
    assert evidence_state(True, {S.OFFLOAD_STORE_BYTES: 1.0}, {}, before(True), {}, CHUNK) == State.STORING
    assert asked == []
    reuse = {S.OFFLOAD_STORE_BYTES: 1.0, S.GPU_PREFIX_HITS: 1.0}
    assert evidence_state(True, reuse, {}, before(True), {}, CHUNK) == State.STORE_WITHOUT_LOAD
    assert evidence_state(True, reuse, {}, before(False), {}, CHUNK) == State.STORING
    assert asked == [True, False]

"""The one evidence schema every KV-offload backend is mapped onto: logical signals in native units.

Why a schema and not per-backend code: each backend says "stored / loaded / looked up / hit / dropped"
in its own families and units (bytes, tokens, blocks, chunks); one declarative row per upstream series
keeps the mapping reviewable against the sources and lets state, ratios and alerts compare like with
like. Pure: imports only the exposition name helper.
"""

from __future__ import annotations

from dataclasses import KW_ONLY, dataclass
from enum import StrEnum
from typing import NamedTuple

from kvoffload_exporter.ingest.families import canonical


class Backend(StrEnum):
    """Which offload implementation a scrape shows (closed set; several can be present at once)."""

    NATIVE = "native"  # OffloadingConnector, CPUOffloadingSpec
    TIERING = "tiering"  # OffloadingConnector, TieringOffloadingSpec (0.28+)
    SIMPLECPU = "simplecpu"  # SimpleCPUOffloadConnector (0.31+)
    MULTICONNECTOR = "multiconnector"  # MultiConnector with llm-d suffixed family sets
    LMCACHE = "lmcache"  # LMCacheConnectorV1, in-process LMCache (lmcache:*)
    LMCACHE_MP = "lmcache_mp"  # LMCacheMPConnector + the LMCache MP server endpoint
    KVBM = "kvbm"  # NVIDIA Dynamo KVBM (kvbm_*)
    MOONCAKE_STORE = "mooncake_store"  # MooncakeStoreConnector (0.33+): puts and gets by key
    UMBP = "umbp"  # UMBP store connector (0.33+): stores and loads to a shared memory pool


class Evidence(StrEnum):
    """Logical offload signals. CASCADED and PROMOTED are per-tier breakdowns: never add them to STORED
    or LOADED (a cascade primary -> fs is not a second GPU store, a promotion is not a second load)."""

    STORED = "stored"
    LOADED = "loaded"
    LOOKUPS = "lookups"
    HITS = "hits"
    DROPPED = "dropped"
    CAPACITY = "capacity"
    IN_FLIGHT = "in_flight"
    USED = "used"
    CASCADED = "cascaded"
    PROMOTED = "promoted"
    PROMOTION_SECONDS = "promotion_seconds"
    PROMOTIONS = "promotions"
    SERVED_BY = "served_by"  # prompt_tokens_cached_by_source, detail = source
    KV_FETCH = "kv_fetch"  # num_requests_kv_fetch_by_stage, detail = stage
    # vLLM 0.34 (tiering, Mooncake store, NIXL, the engine): failures and what a tier holds back
    PROMOTION_FAILED = "promotion_failed"  # failed promotion jobs secondary -> primary, per tier
    CASCADE_FAILED = "cascade_failed"  # failed cascade jobs primary -> secondary, per tier
    DEFERRED_RELEASE = "deferred_release"  # primary chunks of failed promotions held back (0.34), per tier
    DEFERRED_RELEASE_SECONDS = "deferred_release_seconds"  # hold time (histogram sum), per tier
    DEFERRED_RELEASES = "deferred_releases"  # completed deferred releases (histogram count), per tier
    PRIMARY_USAGE = "primary_usage"  # primary-tier share used by promotions/cascades, detail = direction
    TIER_TRANSFER_SECONDS = "tier_transfer_seconds"  # time reading/writing a secondary tier, detail = direction
    LOAD_FAILED = "load_failed"  # gets (loads) a store answered with an error, whole or in part
    OPERATION_SECONDS = "operation_seconds"  # a store's operation latency (histogram sum), detail = operation
    OPERATIONS = "operations"  # a store's operations (histogram count), detail = operation
    TRANSFER_FAILED = "transfer_failed"  # KV transfer failures (NIXL, Mooncake P2P), detail = kind
    INTEGRITY = "integrity"  # events that may mean corrupted outputs, detail = kind
    ACTIVE_JOBS = "active_jobs"  # a tiering secondary tier's active promotion or cascade jobs, detail = kind
    RESIDENCY_SECONDS = "residency_seconds"  # measured GPU block residency (histogram sum), detail = kind
    RESIDENCY_SAMPLES = "residency_samples"  # its sampled blocks (histogram count), detail = kind


class NativeUnit(StrEnum):
    """The unit a backend counts in; part of every evidence family's name (kvoffload_backend_stored_blocks_total)."""

    BYTES = "bytes"
    TOKENS = "tokens"
    BLOCKS = "blocks"
    CHUNKS = "chunks"
    STORES = "stores"
    KEYS = "keys"  # objects of a key-value store, one per block key (UMBP)
    PROMOTIONS = "promotions"
    JOBS = "jobs"
    REQUESTS = "requests"
    RATIO = "ratio"
    SECONDS = "seconds"
    OPERATIONS = "operations"  # a store's calls (Mooncake store get/put/lease operations)
    EVENTS = "events"  # transfer failures and integrity events, one per occurrence as the source counts it
    BLOCKS_SAMPLED = "samples"  # blocks a sampled histogram observed


class DropReason(StrEnum):
    """Closed `reason` of the kvoffload_backend_dropped_*_total families."""

    CPU_FULL = "cpu_full"
    REQUEST_GONE = "request_gone"
    NULL_BLOCK = "null_block"
    NOT_HASHED = "not_hashed"
    BACKPRESSURE = "backpressure"
    ALLOCATION_FAILURE = "allocation_failure"
    PROMOTION_ALLOCATION_FAILURE = "promotion_allocation_failure"
    STORE_ERROR = "store_error"  # a put the store answered with an error (Mooncake store, UMBP)


class Kind(StrEnum):
    """How samples of one row combine: counters sum (pid splits too), gauges take the max per series
    (stale pid copies) then sum over distinct series, info rows read a number from a label."""

    COUNTER = "counter"
    GAUGE = "gauge"
    INFO = "info"


class EvidenceKey(NamedTuple):
    """One evidence series of one engine. `detail` is the stage, source or promotion result."""

    signal: Evidence
    unit: NativeUnit
    tier: str = ""
    connector: str = ""
    reason: str = ""
    detail: str = ""


CUMULATIVE: frozenset[Evidence] = frozenset(
    {
        Evidence.STORED,
        Evidence.LOADED,
        Evidence.LOOKUPS,
        Evidence.HITS,
        Evidence.DROPPED,
        Evidence.CASCADED,
        Evidence.PROMOTED,
        Evidence.PROMOTION_SECONDS,
        Evidence.PROMOTIONS,
        Evidence.SERVED_BY,
        Evidence.PROMOTION_FAILED,
        Evidence.CASCADE_FAILED,
        Evidence.DEFERRED_RELEASE_SECONDS,
        Evidence.DEFERRED_RELEASES,
        Evidence.TIER_TRANSFER_SECONDS,
        Evidence.LOAD_FAILED,
        Evidence.OPERATION_SECONDS,
        Evidence.OPERATIONS,
        Evidence.TRANSFER_FAILED,
        Evidence.INTEGRITY,
        Evidence.RESIDENCY_SECONDS,
        Evidence.RESIDENCY_SAMPLES,
    }
)
"""Signals whose values are cumulative (deltas over a window); the others are last values."""


@dataclass(frozen=True)
class Source:
    """One upstream series carrying one logical signal, as a declarative table row.

    `name` is the sample name as exposed (with `_total` where the wire has it); `match` selects children;
    `tier`, `connector`, `reason`, `detail` are fixed key parts, `tier_label` / `detail_label` copy a
    label's value instead. Rows sharing a non-empty `group` are alternatives: the first whose family the
    scrape declares is used, the others never (one number, never two added)."""

    name: str
    signal: Evidence
    unit: NativeUnit
    _: KW_ONLY
    kind: Kind = Kind.COUNTER
    match: tuple[tuple[str, str], ...] = ()
    suffix: str = ""  # histogram part: "sum" | "count"
    label_value: str = ""  # INFO: the label whose value is the number
    tier: str = ""
    tier_label: str = ""
    connector: str = ""
    reason: str = ""
    detail: str = ""
    detail_label: str = ""
    group: str = ""

    @property
    def family(self) -> str:
        """Canonical family name as kvoffload_exporter.ingest.exposition reports it (`vllm:`, no `_total`)."""
        return canonical(self.name)

    @property
    def resolved_name(self) -> str:
        """What the user can grep for on /metrics: the exposed name with its fixed label selector."""
        base = f"{self.name}_{self.suffix}" if self.suffix else self.name
        if self.label_value:
            base = f"{base}{{{self.label_value}}}"
        if self.match:
            base += "{" + ",".join(f'{k}="{v}"' for k, v in self.match) + "}"
        return base


@dataclass(frozen=True)
class BackendTable:
    """A backend: the families whose presence selects it, the ones it replaces, and its rows."""

    backend: Backend
    detect: frozenset[str]  # canonical families; any one present selects the backend
    rows: tuple[Source, ...]
    supersedes: frozenset[Backend] = frozenset()
    _: KW_ONLY
    # What the README's generated backend table says of it (kvoffload_exporter.bundle.texts.readme), beside the rows:
    title: str = ""  # the connector or product as users name it
    versions: str = ""  # the releases whose families the rows are checked against
    evidence: str = ""  # where the rows are proven: captured / reconstructed fixtures, simulated

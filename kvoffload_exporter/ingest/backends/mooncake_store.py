"""MooncakeStoreConnector (0.33): a distributed KV store read by key; no vllm:kv_offload_* family.

Stores are `save_put` bytes with `status="ok"`, loads `load_get` bytes with `status="ok"`. A put whose
RPC raised (`status="error"`) or whose store refused some keys (`status="partial_failure"`) still adds the
whole batch's bytes to its status, so summing statuses would count failed stores as stored: only the `ok`
children are read as stored, and both failing statuses are drops (reason `store_error`, counted in calls).
Children appear on each (operation, status)'s first operation (vLLM 0.33.0 store/worker.py:682-703).
"""

from __future__ import annotations

from kvoffload_exporter.ingest.backends.common import by_source, ext_hits, ext_queries
from kvoffload_exporter.ingest.backends.schema import Backend, BackendTable, DropReason, Evidence, NativeUnit, Source

E, U = Evidence, NativeUnit
OPS = "vllm:mooncake_store_operation_total"
BYTES = "vllm:mooncake_store_operation_bytes_total"
FAILED_KEYS = "vllm:mooncake_store_operation_failed_keys_total"
TIME = "vllm:mooncake_store_operation_time_seconds"

ROWS: tuple[Source, ...] = (
    Source(BYTES, E.STORED, U.BYTES, match=(("operation", "save_put"), ("status", "ok"))),
    Source(BYTES, E.LOADED, U.BYTES, match=(("operation", "load_get"), ("status", "ok"))),
    *(
        Source(
            OPS, E.DROPPED, U.STORES, match=(("operation", "save_put"), ("status", st)), reason=DropReason.STORE_ERROR
        )
        for st in ("error", "partial_failure")
    ),
    # Gets that failed, whole (`error`) or in part (`partial_failure`): the keys lost are recomputed
    # (vllm 0.34.0 store/worker.py:1450-1480; failed keys store/metrics.py:153, 189).
    Source(FAILED_KEYS, E.LOAD_FAILED, U.KEYS, match=(("operation", "load_get"),)),
    *(
        Source(OPS, E.LOAD_FAILED, U.OPERATIONS, match=(("operation", "load_get"), ("status", st)))
        for st in ("error", "partial_failure")
    ),
    # Latency per operation (save_exists, save_put, load_get, lookup_exists; lookup_lease from 0.34's
    # store/selective_lease.py:191-206), summed over statuses (store/metrics.py:116).
    Source(TIME, E.OPERATION_SECONDS, U.SECONDS, suffix="sum", detail_label="operation"),
    Source(TIME, E.OPERATIONS, U.OPERATIONS, suffix="count", detail_label="operation"),
    by_source("external_unspecified", group="hits_tokens"),
    ext_hits(),
    ext_queries(),
)

TABLE = BackendTable(
    Backend.MOONCAKE_STORE,
    detect=frozenset({Source(OPS, E.DROPPED, U.STORES).family, ROWS[0].family}),
    rows=ROWS,
    title="Mooncake store (`MooncakeStoreConnector`)",
    versions="vLLM 0.32–0.34",
    evidence="reconstructed (`mooncake-store-0.33`, `mooncake-store-0.34`); simulated",
)

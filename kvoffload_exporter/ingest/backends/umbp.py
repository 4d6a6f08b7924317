"""UMBP store connector (vLLM 0.33): KV stored to and loaded from a shared memory pool, per `operation`.

`vllm:umbp_transfer_{submitted,completed,failed,bytes}_total` carry `operation` = `store` (GPU -> pool)
or `load` (pool -> GPU) (umbp/stats.py:92, worker.py:158). Bytes count only ranges that completed, so
`bytes{operation="store"}` is stored and `bytes{operation="load"}` loaded; objects whose store failed are
drops (reason `store_error`, in keys: one object per block key). Not a transfer between instances: the
pool is read back by this engine, like any tier.
"""

from __future__ import annotations

from kvoffload_exporter.ingest.backends.common import by_source, ext_hits, ext_queries
from kvoffload_exporter.ingest.backends.schema import Backend, BackendTable, DropReason, Evidence, NativeUnit, Source

E, U = Evidence, NativeUnit
BYTES = "vllm:umbp_transfer_bytes_total"
FAILED = "vllm:umbp_transfer_failed_total"

ROWS: tuple[Source, ...] = (
    Source(BYTES, E.STORED, U.BYTES, match=(("operation", "store"),)),
    Source(BYTES, E.LOADED, U.BYTES, match=(("operation", "load"),)),
    Source(FAILED, E.DROPPED, U.KEYS, match=(("operation", "store"),), reason=DropReason.STORE_ERROR),
    by_source("external_unspecified", group="hits_tokens"),
    ext_hits(),
    ext_queries(),
)

TABLE = BackendTable(
    Backend.UMBP,
    detect=frozenset({ROWS[0].family, ROWS[2].family}),
    rows=ROWS,
    title="UMBP store connector",
    versions="vLLM 0.33",
    evidence="reconstructed (`umbp-0.33`); simulated",
)

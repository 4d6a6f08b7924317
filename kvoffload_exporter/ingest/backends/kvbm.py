"""NVIDIA Dynamo KVBM (`kvbm_*` on its own endpoint, DYN_KVBM_METRICS=true). Counters come without
`_total` (Rust prometheus crate); both spellings are read. `offload_blocks_h2d` is host -> disk (a
cascade, breakdown) while `onboard_blocks_h2d` is host -> device (a load). Blocks, except matched tokens."""

from __future__ import annotations

from kvoffload_exporter.ingest.backends.common import by_source, ext_hits, ext_queries
from kvoffload_exporter.ingest.backends.schema import Backend, BackendTable, Evidence, NativeUnit, Source

E, U = Evidence, NativeUnit
K = "kvbm_"

ROWS: tuple[Source, ...] = (
    Source(K + "offload_blocks_d2h", E.STORED, U.BLOCKS, tier="host"),
    Source(K + "offload_blocks_d2d", E.STORED, U.BLOCKS, tier="disk"),
    Source(K + "offload_blocks_d2o", E.STORED, U.BLOCKS, tier="object"),
    Source(K + "offload_blocks_h2d", E.CASCADED, U.BLOCKS, tier="disk"),
    Source(K + "onboard_blocks_h2d", E.LOADED, U.BLOCKS, tier="host"),
    Source(K + "onboard_blocks_d2d", E.LOADED, U.BLOCKS, tier="disk"),
    Source(K + "onboard_blocks_o2d", E.LOADED, U.BLOCKS, tier="object"),
    Source(K + "matched_tokens", E.HITS, U.TOKENS, group="hits_tokens"),
    by_source("external_unspecified", group="hits_tokens"),
    ext_hits(),
    ext_queries(),
)

TABLE = BackendTable(
    Backend.KVBM,
    detect=frozenset(s.family for s in ROWS[:8]),
    rows=ROWS,
    title="NVIDIA Dynamo KVBM (its own endpoint)",
    versions="KVBM 1.6.1",
    evidence="reconstructed (`kvbm-1.6.1`)",
)

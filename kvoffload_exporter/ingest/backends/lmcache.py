"""LMCache: in-process `LMCacheConnectorV1` (`lmcache:*` on vLLM's multiprocess /metrics) and the
0.33 `--kv-offloading-backend lmcache` path (`LMCacheMPConnector`, counters on the MP server's own
endpoint, OpenTelemetry names). vLLM registers no family for in-process LMCache: its hits reach vLLM
only as external hits (`cached_by_source{source="external_unspecified"}`). `lmcache:*` carry no
`engine`; lookups are counted by the scheduler role, stores/retrieves by the worker role (the other
role sits at 0; each row reads its own role)."""

from __future__ import annotations

from kvoffload_exporter.ingest.backends.common import by_source, ext_hits, ext_queries
from kvoffload_exporter.ingest.backends.schema import Backend, BackendTable, Evidence, Kind, NativeUnit, Source

E, U = Evidence, NativeUnit
W, S = (("role", "worker"),), (("role", "scheduler"),)

IN_PROCESS: tuple[Source, ...] = (
    Source("lmcache:num_stored_tokens_total", E.STORED, U.TOKENS, match=W),
    Source("lmcache:num_hit_tokens_total", E.LOADED, U.TOKENS, match=W),
    Source("lmcache:num_lookup_tokens_total", E.LOOKUPS, U.TOKENS, match=S, group="lookups_tokens"),
    ext_queries(),
    Source("lmcache:num_lookup_hits_total", E.HITS, U.TOKENS, match=S, group="hits_tokens"),
    by_source("external_unspecified", group="hits_tokens"),
    ext_hits(),
    Source("lmcache:local_cache_usage", E.USED, U.BYTES, kind=Kind.GAUGE, match=W),
)

MP: tuple[Source, ...] = (
    Source("lmcache_mp_l1_write_chunks_total", E.STORED, U.CHUNKS),
    Source("lmcache_mp_l1_read_chunks_total", E.LOADED, U.CHUNKS),
    Source("lmcache_mp_lookup_requested_tokens_total", E.LOOKUPS, U.TOKENS, group="lookups_tokens"),
    ext_queries(),
    Source("lmcache_mp_lookup_hit_tokens_total", E.HITS, U.TOKENS, group="hits_tokens"),
    by_source("external_unspecified", group="hits_tokens"),
    ext_hits(),
)
MP_DURATION = "vllm:lmcache_mp_lookup_duration_seconds"  # vLLM side: selects the backend without the server

TABLE = BackendTable(
    Backend.LMCACHE,
    detect=frozenset(s.family for s in IN_PROCESS[:3]),
    rows=IN_PROCESS,
    title="LMCache in-process (`LMCacheConnectorV1`)",
    versions="vLLM 0.33, LMCache 0.5.6",
    evidence="reconstructed (`lmcache-0.33`); simulated",
)
MP_TABLE = BackendTable(
    Backend.LMCACHE_MP,
    detect=frozenset({*(s.family for s in MP[:3]), MP_DURATION}),
    rows=MP,
    title="LMCache MP server (`--kv-offloading-backend lmcache`, its own endpoint)",
    versions="vLLM 0.33",
    evidence="reconstructed (`lmcache-mp-0.33`)",
)

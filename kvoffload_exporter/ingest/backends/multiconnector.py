"""MultiConnector with a second OffloadingConnector registered by llm-d's fs backend: that child's
counters and histograms carry a suffix before `_total` (`vllm:kv_offload_load_bytes_sharedstorage_total`;
suffix = spec name without OffloadingSpec, lower-cased). Each child is one `connector`; stock vLLM
merges same-class children into one set (read as `native`), and a child without metrics of its own adds
none (a running 0.32.0 with the ExampleConnector: `native`, that child seen only in
cached_by_source `external_unspecified`). Known suffixes are listed here: a name built at run time cannot
be matched before it is seen."""

from __future__ import annotations

from kvoffload_exporter.ingest.backends import native
from kvoffload_exporter.ingest.backends.common import by_source, ext_queries
from kvoffload_exporter.ingest.backends.schema import Backend, BackendTable, Evidence, NativeUnit, Source

E, U = Evidence, NativeUnit
SUFFIXES = ("sharedstorage",)
DEFAULT = "default"  # the unsuffixed child (whichever registered first)
LOOKUP = "vllm_llmd_fs_metadata_cache_lookup_blocks_total"


def _child(sfx: str) -> tuple[Source, ...]:
    return native.transfer_rows(f"_{sfx}", connector=sfx)


ROWS: tuple[Source, ...] = (
    *native.transfer_rows(connector=DEFAULT),
    *(r for sfx in SUFFIXES for r in _child(sfx)),
    *native.in_flight(connector=DEFAULT),
    by_source("host", connector=DEFAULT),
    by_source("external_unspecified", connector=SUFFIXES[0]),
    ext_queries(),
    Source(LOOKUP, E.LOOKUPS, U.BLOCKS, connector=SUFFIXES[0]),
    Source(LOOKUP, E.HITS, U.BLOCKS, match=(("result", "fs_hit"),), connector=SUFFIXES[0], tier="fs"),
    Source(LOOKUP, E.HITS, U.BLOCKS, match=(("result", "mem_hit"),), connector=SUFFIXES[0], tier="mem"),
)

TABLE = BackendTable(
    Backend.MULTICONNECTOR,
    detect=frozenset(s.family for sfx in SUFFIXES for s in _child(sfx)),
    rows=ROWS,
    supersedes=frozenset({Backend.NATIVE}),
    title="MultiConnector + llm-d fs",
    versions="vLLM 0.26–0.33",
    evidence="reconstructed (`multiconnector-llmd-0.32`)",
)

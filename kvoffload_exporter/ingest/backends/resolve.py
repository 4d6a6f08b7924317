"""Pick the backend(s) a scrape shows and fold their samples into evidence series per engine.

normalise hands every sample of `FAMILIES` here (labels without model_name/engine/pid); the tables
decide what each number means. A family a backend declares but has no child for yet reads 0, so a
first load is a delta, not a new series; alternatives in a group never add up.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from functools import lru_cache

from kvoffload_exporter.ingest.backends import (
    common,
    kvbm,
    lmcache,
    mooncake_store,
    multiconnector,
    native,
    simplecpu,
    tiering,
    umbp,
)
from kvoffload_exporter.ingest.backends.schema import (
    CUMULATIVE,
    Backend,
    BackendTable,
    Evidence,
    EvidenceKey,
    Kind,
    NativeUnit,
    Source,
)
from kvoffload_exporter.ingest.exposition import ParseError, info_number
from kvoffload_exporter.ingest.families import HISTOGRAMS as TYPED_HISTOGRAMS

Labels = tuple[tuple[str, str], ...]
RawSample = tuple[str, str, Labels, float]
"""(canonical family, histogram suffix or "", labels without model_name/engine/pid, value)."""

SourceRef = tuple[str, str, str]
"""(signal, resolved_name, unit): one row of kvoffload_source_metric_info."""

TABLES: tuple[BackendTable, ...] = (
    tiering.TABLE,
    multiconnector.TABLE,
    native.TABLE,
    simplecpu.TABLE,
    lmcache.TABLE,
    lmcache.MP_TABLE,
    kvbm.TABLE,
    mooncake_store.TABLE,
    umbp.TABLE,
)
_ALL_ROWS: tuple[Source, ...] = (*common.SHARED, *common.ALWAYS, *(r for t in TABLES for r in t.rows))
FAMILIES: frozenset[str] = frozenset({r.family for r in _ALL_ROWS} | {f for t in TABLES for f in t.detect})
"""Every family the resolver reads (canonical names): normalise adds them to its selector."""
SIGNAL_UNITS: dict[Evidence, tuple[NativeUnit, ...]] = {
    sig: tuple(u for u in NativeUnit if any(r.signal == sig and r.unit == u for r in _ALL_ROWS)) for sig in Evidence
}
"""Every unit each evidence signal is read in by some backend: the catalogue exports one family per pair."""
HISTOGRAMS: frozenset[str] = FAMILIES & TYPED_HISTOGRAMS
"""Of those, the histograms, typed by the one family table (kvoffload_exporter.ingest.families)."""


@lru_cache(maxsize=64)
def detect(families: frozenset[str]) -> tuple[Backend, ...]:
    """Backends whose families the scrape declares, minus those a more specific one supersedes."""
    found = [t for t in TABLES if t.detect & families]
    dropped = {b for t in found for b in t.supersedes}
    return tuple(t.backend for t in found if t.backend not in dropped)


@lru_cache(maxsize=64)
def rows_for(backends: tuple[Backend, ...], families: frozenset[str]) -> tuple[Source, ...]:
    """The rows to read: each backend's plus the shared ones, the first present row of each group only; the
    transfer-failure and integrity rows (common.ALWAYS) whatever the backend, with none too."""
    always = tuple(r for r in common.ALWAYS if r.family in families)
    if not backends:
        return always
    by_backend = {t.backend: t for t in TABLES}
    chosen: list[Source] = []
    groups: set[str] = set()
    for row in (*(r for b in backends for r in by_backend[b].rows), *common.SHARED, *always):
        if row.family not in families or row in chosen:
            continue
        if row.group:
            if row.group in groups:
                continue
            groups.add(row.group)
        chosen.append(row)
    return tuple(chosen)


def sources(rows: Iterable[Source]) -> tuple[SourceRef, ...]:
    """What each evidence number came from, for kvoffload_source_metric_info (deduplicated, sorted)."""
    return tuple(sorted({(r.signal.value, r.resolved_name, r.unit.value) for r in rows}))


def _key(row: Source, labels: Mapping[str, str]) -> EvidenceKey:
    return EvidenceKey(
        row.signal,
        row.unit,
        labels.get(row.tier_label, "") if row.tier_label else row.tier,
        row.connector,
        row.reason,
        labels.get(row.detail_label, "") if row.detail_label else row.detail,
    )


@lru_cache(maxsize=64)
def _index(rows: tuple[Source, ...]) -> dict[tuple[str, str], tuple[Source, ...]]:
    out: dict[tuple[str, str], list[Source]] = {}
    for r in rows:
        out.setdefault((r.family, r.suffix), []).append(r)
    return {k: tuple(v) for k, v in out.items()}


_Prepared = tuple[tuple[Source, ...], dict[tuple[str, str], tuple[Source, ...]], tuple[tuple[EvidenceKey, str], ...]]
_PREPARED: dict[int, _Prepared] = {}
"""id(rows) → (rows, their index by (family, suffix), the (key, family) of their counters that read 0 when
declared without a child). The same few row tuples serve every poll (rows_for is cached); holding `rows` keeps
its id from being reused while it is cached. Bounded: a new tuple past the bound starts it over."""
_KEYS: dict[tuple[int, Labels], tuple[Source, EvidenceKey | None]] = {}
"""(id(row), labels) → (row, the sample's evidence key, or None when the row's `match` refuses the labels).
Holding the row keeps its id from being reused while it is cached (a row's own hash is a Python call
over all its fields). Bounded by `_MAX_KEYS` entries of label sets up to `_MAX_TEXT` characters: a
target inventing label sets only starts it over."""
_MAX_PREPARED, _MAX_KEYS, _MAX_TEXT = 64, 4096, 1024


def _prepared(rows: tuple[Source, ...]) -> _Prepared:
    got = _PREPARED.get(id(rows))
    if got is None or got[0] is not rows:
        zero = tuple(
            (_key(r, {}), r.family) for r in rows if r.kind == Kind.COUNTER and not r.tier_label and not r.detail_label
        )
        if len(_PREPARED) >= _MAX_PREPARED:
            _PREPARED.clear()
        got = _PREPARED[id(rows)] = (rows, _index(rows), zero)
    return got


def _key_of(row: Source, rest: Labels) -> EvidenceKey | None:
    slot = (id(row), rest)
    got = _KEYS.get(slot)
    if got is None or got[0] is not row:
        labels = dict(rest)
        got = (row, None if any(labels.get(k) != v for k, v in row.match) else _key(row, labels))
        if sum(len(k) + len(v) for k, v in rest) <= _MAX_TEXT:  # a long label set is not held
            if len(_KEYS) >= _MAX_KEYS:
                _KEYS.clear()
            _KEYS[slot] = got
    return got[1]


Origins = Mapping[str, int]
"""Canonical family -> the source whose body declared it (1, 2, ...: a target's extra endpoints in config
order); a family absent from it came from vLLM's own body (source 0)."""


def resolve(
    rows: tuple[Source, ...], raw: Iterable[RawSample], origins: Origins | None = None
) -> tuple[dict[EvidenceKey, float], dict[EvidenceKey, float], dict[EvidenceKey, int]]:
    """Samples of one engine -> (cumulative evidence, last-value evidence, the source of each cumulative
    series that is not vLLM's own body). The source decides which counters a restart resets
    (kvoffload_exporter.derive.window): an extra endpoint that restarts resets only its own series."""
    _, index, zero = _prepared(rows)
    counters: dict[EvidenceKey, float] = {}
    origin: dict[EvidenceKey, int] = {}
    per_series: dict[tuple[EvidenceKey, Source, Labels], float] = {}
    for fam, sfx, rest, value in raw:
        for row in index.get((fam, sfx), ()):
            key = _key_of(row, rest)
            if key is None:
                continue
            if row.kind == Kind.COUNTER:
                total = counters.get(key, 0.0) + value  # pid splits of a counter add up
                if not 0.0 <= total < math.inf:  # would poison the reset-adjusted totals: the poll fails
                    raise ParseError(f"negative or non-finite cumulative value {value} in {row.name}")
                counters[key] = total
                if origins and (src := origins.get(fam)):
                    origin[key] = src
                continue
            v = info_number(dict(rest).get(row.label_value)) if row.kind == Kind.INFO else value
            if v is None:
                continue
            series = (key, row, () if row.kind == Kind.INFO else rest)
            prev = per_series.get(series)
            per_series[series] = v if prev is None else max(prev, v)  # stale pid copies: max, never a sum
    for key, fam in zero:  # a declared family without a child yet: nothing happened, which is 0
        if key not in counters:
            counters[key] = 0.0
            if origins and (src := origins.get(fam)):
                origin[key] = src
    gauges: dict[EvidenceKey, float] = {}
    for (key, _, _), v in per_series.items():
        gauges[key] = gauges.get(key, 0.0) + v
    return counters, gauges, origin


def is_cumulative(key: EvidenceKey) -> bool:
    return key.signal in CUMULATIVE


BYTES_PER_GIB = 2**30


def unit_bytes(
    gauges: Mapping[EvidenceKey, float], cache_config: Mapping[str, str]
) -> dict[tuple[NativeUnit, str], float]:
    """Bytes per native unit where the exposition itself gives the factor: {(unit, basis): bytes}.

    blocks: kv_offloading_size (GiB, cache_config_info) x 2^30 / capacity_blocks (simple_kv_offload_info;
    approximate: floor division upstream); chunks: cpu_kv_cache_size_bytes / cpu_num_chunks
    (kv_offload_config_info). No other unit is ever converted."""
    out: dict[tuple[NativeUnit, str], float] = {}
    cap = {(k.unit, k.tier, k.connector): v for k, v in gauges.items() if k.signal == Evidence.CAPACITY}
    size_gib = info_number(cache_config.get("kv_offloading_size"))
    blocks = cap.get((NativeUnit.BLOCKS, "", ""))
    if size_gib and blocks:
        out[(NativeUnit.BLOCKS, "kv_offloading_size/capacity_blocks")] = size_gib * BYTES_PER_GIB / blocks
    for (unit, tier, conn), chunks in cap.items():
        size = cap.get((NativeUnit.BYTES, tier, conn))
        if unit == NativeUnit.CHUNKS and chunks and size:
            out[(NativeUnit.CHUNKS, "cpu_kv_cache_size_bytes/cpu_num_chunks")] = size / chunks
    return out

"""vLLM `/metrics` text → version-agnostic `Snapshot` of logical signals per (model_name, engine).

Handles every vLLM generation from 0.10 to 0.33: flat offload families (0.24+) are preferred and the
`transfer_type` generation (0.16+, mirrored since 0.24) is used only when no flat family exists, so
bytes are never counted twice; `gpu_*` aliases (0.10/0.11) only when the new name is absent; names
with or without `_total`; `_created` ignored; `pid`-split series (multiprocess mode) summed for
counters and histograms, max for advisory gauges. Unknown families are ignored.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from operator import itemgetter
from typing import Any, NamedTuple

from kvoffload_exporter.config.limits import Limits
from kvoffload_exporter.ingest import backends, histplan
from kvoffload_exporter.ingest.exposition import LimitError, ParseError, Sample
from kvoffload_exporter.ingest.families import ALIASES
from kvoffload_exporter.ingest.families import HISTOGRAMS as _TYPED_HISTOGRAMS
from kvoffload_exporter.ingest.families import OFFLOAD_PREFIX as _OFFLOAD_FAMILY_PREFIX
from kvoffload_exporter.ingest.families import TABLE as _TABLE
from kvoffload_exporter.ingest.interning import name_set
from kvoffload_exporter.ingest.linecache import LineCache
from kvoffload_exporter.ingest.lineplan import Planned, flat
from kvoffload_exporter.ingest.routes import INFO, LEGACY_SIZE_NAMES, ROUTES, Engine, hist_name, idle, on_hist
from kvoffload_exporter.ingest.samples import labels_reader as _labels_reader
from kvoffload_exporter.ingest.signalmap import (
    CACHE_INFO,
    COUNTERS,
    FAMILIES,
    FAMILY_SET,
    FLAT,
    FLAT_SIZE,
    HISTOGRAMS,
    LEGACY,
    LEGACY_SIZE,
    LOOKUP_DELAY,
    PREFILL,
    QUEUE_TIME,
    TTFT,
)
from kvoffload_exporter.ingest.snapshot import OFFLOAD_SIGNALS, EngineSignals, Generation, Signal, Snapshot
from kvoffload_exporter.ingest.spellread import read_spelled, selectors

# Backend families (SimpleCPU, tiering, LMCache, KVBM, ...) go to ingest.backends, which owns their meaning.
_BACKEND_SET = backends.FAMILIES
# One selection from the one family table (one per spelling of vLLM's names): each sample is matched
# once, then routed to its readers.
_SELECTORS = selectors(tuple(sorted(_TABLE)), _TYPED_HISTOGRAMS)

_GEN_FLAT = frozenset({*FLAT, *FLAT_SIZE})
_GEN_LEGACY = frozenset({*LEGACY, LEGACY_SIZE})
_ALIASED = frozenset(ALIASES)


_FAMILY_OF, _VALUE_OF = itemgetter(0), itemgetter(3)
_LINE_FACTOR = 32
"""A selected line may be this many label-value limits long (cache_config_info carries ~20 labels)."""


def normalise(
    text: str,
    limits: Limits | None = None,
    cache: LineCache | None = None,
    scrub: Callable[[str], str] | None = None,
    origins: backends.Origins | None = None,
) -> Snapshot:
    """Read one vLLM exposition within `limits` (defaults when None). Pure and CPU-bound: the
    poller runs it off the event loop. Raises exposition.ParseError (LimitError past a cap).
    `cache` is the target's own LineCache: the same result, with the series it sent before read faster.
    `scrub` is applied to every label text before it is kept (the target's credentials, redact.Scrubber).
    `origins`: the families each extra endpoint's body declared (exposition.join_sources), so that the
    evidence says which source each series came from."""
    lim = limits or Limits()
    max_len = lim.label_value_length_limit
    line_cap = _LINE_FACTOR * max_len + 1024
    reader, key = _labels_reader(max_len, scrub), (max_len, scrub) if scrub else max_len
    samples, typed = read_spelled(text, _SELECTORS, reader, lim.sample_limit, line_cap, cache, key)
    if cache is None or not cache.plan.hit:  # a replayed plan has the series of a body that passed this
        _refuse_reordered(samples, cache)
    if cache is None:
        return _snapshot(samples, typed, lim, origins=origins)[0]
    last, slot = cache.last, cache.plan
    planned = samples if slot.hit and isinstance(samples, Planned) else None
    values = planned.values if planned is not None else tuple(map(_VALUE_OF, samples))  # a planned read's
    said = planned.text if planned is not None else None
    shape = fixed = None
    if planned is not None and isinstance(last, _Last) and last.plan is slot.plan:  # the same heads as last time
        same = said == last.text and last.typed == typed and last.limits == lim and last.origins == origins
        if same:
            return last.snapshot  # an idle target: the same samples make the same snapshot
        shape = last.shape or histplan.compile(samples, hist_name, idle)
        fixed = last.fixed if last.typed == typed else None
    prev = last.snapshot if isinstance(last, _Last) else None
    snap, fixed = _snapshot(samples, typed, lim, prev, shape, values, fixed, origins)
    cache.last = _Last(said, typed, lim, snap, slot.plan, shape, fixed, origins)
    return snap


class _Last(NamedTuple):
    """What the last read made, kept by the target's LineCache. Its samples are not kept: with the same
    line plan (`plan`) the heads are the same, so the values alone say whether anything changed, and of
    them only their text (`Planned.text`; None after a long read): the same text is the same values, and
    a text that differs only in how it writes them is read again, to the same snapshot."""

    text: bytes | None
    typed: AbstractSet[str]
    limits: Limits
    snapshot: Snapshot
    plan: object  # the line plan with these samples' heads (None: none)
    shape: histplan.Shape | None
    fixed: _Fixed
    origins: backends.Origins | None = None


class _Fixed(NamedTuple):
    """What a read's family names alone decide (the heads and the TYPE lines): the same for every body of
    one line plan, so a planned read with the last one's TYPE lines reuses it."""

    families: frozenset[str]
    generation: Generation
    backends: tuple[backends.Backend, ...]
    rows: tuple[backends.Source, ...]
    sources: tuple[backends.SourceRef, ...]
    renames: dict[str, str]  # deprecated family -> current one, for each alias read in its place


def _fixed(
    samples: Sequence[Sample], typed: AbstractSet[str], shape: histplan.Shape | None, prev: Snapshot | None
) -> _Fixed:
    families = {f for f in typed if f in FAMILY_SET or f in _BACKEND_SET}
    families.update(shape.families if shape is not None else map(_FAMILY_OF, samples))
    # A deprecated family stands for its current one (any type) only where that one is absent.
    renames = {a: ALIASES[a] for a in families & _ALIASED if ALIASES[a] not in families}
    families.update(renames.values())
    generation = (
        Generation.FLAT
        if families & _GEN_FLAT
        else Generation.TRANSFER_TYPE
        if families & _GEN_LEGACY
        else Generation.NONE
    )
    found = prev.families if prev is not None and prev.families == families else name_set(frozenset(families))
    present = backends.detect(found)
    rows = backends.rows_for(present, found)
    return _Fixed(found, generation, present, rows, backends.sources(rows), renames)


def _snapshot(
    samples: Sequence[Sample],
    typed: AbstractSet[str],
    lim: Limits,
    prev: Snapshot | None = None,
    shape: histplan.Shape | None = None,
    values: tuple[float, ...] = (),
    fixed: _Fixed | None = None,
    origins: backends.Origins | None = None,
) -> tuple[Snapshot, _Fixed]:
    """The samples of one read, folded into signals and evidence per engine. Parts equal to the target's
    `prev` snapshot (family set, config labels) are that snapshot's objects: the history holds many
    snapshots of one target, and these rarely change. With the `shape` of these samples' heads, the
    histograms are read by position (histplan) and the loop sees only the other samples; with their
    `fixed` parts, those are not worked out again."""
    engines: dict[tuple[str, str], Engine] = defaultdict(Engine)
    raw: dict[tuple[str, str], list[backends.RawSample]] = defaultdict(list)
    engine_only: dict[str, dict[str, str]] = {}  # cache_config_info has `engine` but no model_name
    if fixed is None:
        fixed = _fixed(samples, typed, shape, prev)
    if fixed.renames:  # an old vLLM: its deprecated families read as the current ones, the long way
        renames = fixed.renames
        samples = [(renames.get(s[0], s[0]), *s[1:]) for s in samples]
        shape = None
    done = histplan.values(shape, values) if shape is not None else None
    if shape is None or done is None:  # the long way: every sample through the loop
        multiprocess = _fold(flat(samples), engines, raw, engine_only)
        shape = None
    else:
        rest = samples.rows(shape.rest) if isinstance(samples, Planned) else flat(shape.rest(samples))
        multiprocess = _fold(rest, engines, raw, engine_only) or shape.pid
        for key, name, hist in done:
            engines[key].hists[name] = hist  # type: ignore[assignment]  # .count, .freeze() alike
    if len(engines) > lim.engine_limit:
        raise LimitError("sample_limit", f"{len(engines)} engines (limit {lim.engine_limit})")
    families, generation, rows = fixed.families, fixed.generation, fixed.rows
    _attribute(raw, engines)
    before = {(x.model_name, x.engine): x for x in prev.engines} if prev is not None else {}
    out = []
    for (model, engine), e in sorted(engines.items()):
        if not model and not engine:
            continue
        ev = backends.resolve(rows, raw.get((model, engine), ()), origins) if rows else ({}, {}, {})
        was = before.get((model, engine)) if before else None
        out.append(_freeze(model, engine, e, generation, families, engine_only.get(engine, {}), ev, was))
    snap = Snapshot(
        generation=generation,
        engines=tuple(out),
        families=families,
        multiprocess=multiprocess,
        backends=fixed.backends,
        sources=fixed.sources,
    )
    return snap, fixed


def _refuse_reordered(samples: Sequence[Sample], cache: LineCache | None) -> None:
    """A series repeated with its labels in another order is the same series (Prometheus refuses the
    scrape); summed, it would double the engine's counters. Series with `pid` (multiprocess mode, summed on
    purpose) and Ray Serve's (`ReplicaId`: its `WorkerId` is dropped) are left out. Only a read that did
    not replay a line plan pays for this (one sorted tuple per sample); the plan of a refused body is dropped."""
    seen: set[object] = set()
    for fam, sfx, (key, rest, pid, _), _ in samples:
        if pid or "/" in key[1]:
            continue
        ident = (fam, sfx, key, tuple(sorted(rest)) if len(rest) > 1 else rest)
        if ident in seen:
            if cache is not None:
                cache.plan.plan = None
            raise ParseError(f"duplicate series (the same labels in another order): {fam}{sfx} of {key[0]!r}")
        seen.add(ident)


def _fold(
    rows: Iterable[tuple[Any, ...]],
    engines: dict[tuple[str, str], Engine],
    raw: dict[tuple[str, str], list[backends.RawSample]],
    engine_only: dict[str, dict[str, str]],
) -> bool:
    """Each sample (a row of `lineplan.flat`: its labels' parts spread out) into its engine's accumulators
    (and the backend resolver's raw list); whether any carried `pid`."""
    multiprocess = False
    for fam, sfx, key, rest, pid, le, value in rows:
        multiprocess |= pid
        evidence, handler = ROUTES[fam]
        if evidence:
            raw[key].append((fam, sfx, rest, value))
        if handler is on_hist:  # most samples: histogram buckets, added without a second call
            hists = engines[key].hists
            if sfx:
                hists[fam].add(sfx, value, le)
        elif handler is not None:
            handler(engines[key], fam, sfx, value, rest, le)
        elif fam in INFO:
            info = dict(rest)
            if fam == CACHE_INFO and not key[0]:
                engine_only[key[1]] = info
            else:
                target = engines[key]
                (target.cache_config if fam == CACHE_INFO else target.offload_config).update(info)
    return multiprocess


def _attribute(raw: dict[tuple[str, str], list[backends.RawSample]], engines: dict[tuple[str, str], Engine]) -> None:
    """Backend series without `engine` (lmcache:* has model_name only, kvbm_* no labels) belong to the one
    engine of that model; with several candidates they stay apart (never copied: no double count)."""
    for key in [k for k in raw if not k[1]]:
        cands = [k for k in engines if k[1] and (not key[0] or k[0] == key[0])]
        if len(cands) == 1:
            raw[cands[0]].extend(raw.pop(key))
        elif key[0]:
            engines.setdefault(key, Engine())


def _freeze(
    model: str,
    engine: str,
    e: Engine,
    generation: Generation,
    families: AbstractSet[str],
    engine_info: dict[str, str],
    evidence: tuple[
        dict[backends.EvidenceKey, float], dict[backends.EvidenceKey, float], dict[backends.EvidenceKey, int]
    ],
    prev: EngineSignals | None = None,
) -> EngineSignals:
    """The engine's signals; config dicts equal to `prev`'s are `prev`'s objects (the same ~20 labels
    every poll, held once by the target's history)."""
    counters = dict(e.counters)
    if generation == Generation.TRANSFER_TYPE:
        counters.update(e.legacy)
    if generation != Generation.NONE:
        # A registered offload family without a child for this engine means nothing moved yet.
        for sig in OFFLOAD_SIGNALS:
            counters.setdefault(sig, 0.0)
    for fam, sig in _ZERO_WHEN_REGISTERED:
        if fam in families:
            counters.setdefault(sig, 0.0)
    gauges = e.gauges
    size = e.hists
    load_name, store_name = (*FLAT_SIZE,) if generation == Generation.FLAT else LEGACY_SIZE_NAMES
    load_size, store_size = size.get(load_name), size.get(store_name)
    ttft = size.get(TTFT)
    # Operation counts come from the transfer-size histograms (one observation per worker job).
    if load_size is not None:
        counters[Signal.OFFLOAD_LOADS] = load_size.count
    if store_size is not None:
        counters[Signal.OFFLOAD_STORES] = store_size.count
    return EngineSignals(
        model_name=model,
        engine=engine,
        counters=counters,
        prompt_tokens_by_source=dict(e.by_source),
        gpu_kv_cache_usage=gauges.get(Signal.GPU_KV_CACHE_USAGE),
        offload_inflight=gauges.get(Signal.OFFLOAD_INFLIGHT),
        requests_running=gauges.get(Signal.REQUESTS_RUNNING),
        requests_waiting=gauges.get(Signal.REQUESTS_WAITING),
        ttft=ttft.freeze() if ttft else None,
        offload_load_size=load_size.freeze() if load_size else None,
        offload_store_size=store_size.freeze() if store_size else None,
        cache_config=_same({**engine_info, **e.cache_config}, prev.cache_config if prev else None),
        offload_config=_same(dict(e.offload_config), prev.offload_config if prev else None),
        lookup_async_delay=size[LOOKUP_DELAY].freeze() if LOOKUP_DELAY in size else None,
        queue_time=size[QUEUE_TIME].freeze() if QUEUE_TIME in size else None,
        kv_fetch_by_stage=dict(e.fetch_stage),
        evidence=evidence[0],
        evidence_gauges=evidence[1],
        evidence_origin=evidence[2],
    )


_ZERO_WHEN_REGISTERED = tuple(
    (fam, sig) for fam, sig in (*COUNTERS.items(), *PREFILL.items()) if not fam.startswith(_OFFLOAD_FAMILY_PREFIX)
)
"""Counter families that read as 0 when registered without a child for the engine (offload ones: above)."""


def _same(new: dict[str, str], prev: Mapping[str, str] | None) -> Mapping[str, str]:
    return prev if prev is not None and prev == new else new


__all__ = ["FAMILIES", "HISTOGRAMS", "normalise"]

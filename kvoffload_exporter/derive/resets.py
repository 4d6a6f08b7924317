"""Counter resets per source: which sources of one engine restarted between two scrapes, and its totals
folded so that a restart resets only its own source's series.

Why per source: an engine's evidence can come from several bodies read as one (vLLM's /metrics and a
target's extra endpoints such as the LMCache MP server's). One reset flag per engine made a restart of the
extra endpoint add vLLM's raw counters again (262,144 prompt tokens instead of 131,072 on the
`lmcache-mp-0.33` chain). vLLM's counters, prompt-token sources and TTFT belong to vLLM's body (source 0);
each evidence series to the body that declared it (ingest.exposition.join_sources). Pure.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from typing import Protocol, TypeVar

from kvoffload_exporter.ingest.backends.schema import Evidence, EvidenceKey
from kvoffload_exporter.ingest.snapshot import EngineSignals, Signal

K = TypeVar("K", bound=Hashable)


class Totals(Protocol):
    """What these functions read of an engine's running totals (derive.window.Totals)."""

    @property
    def raw(self) -> Mapping[Signal, float]: ...

    @property
    def raw_by_source(self) -> Mapping[str, float]: ...

    @property
    def evidence(self) -> Mapping[EvidenceKey, float]: ...

    @property
    def raw_evidence(self) -> Mapping[EvidenceKey, float]: ...

    @property
    def evidence_store_base(self) -> Mapping[EvidenceKey, float]: ...

    @property
    def forgiven(self) -> frozenset[EvidenceKey]: ...

    @property
    def origin(self) -> Mapping[EvidenceKey, int]: ...


def stores(evidence: Mapping[EvidenceKey, float]) -> dict[EvidenceKey, float]:
    return {k: v for k, v in evidence.items() if k.signal == Evidence.STORED}


def went_down(last: Mapping[K, float], cur: Mapping[K, float]) -> bool:
    return any(v < last[k] for k, v in cur.items() if k in last)


VLLM_SOURCE = 0
"""vLLM's own body; a target's extra endpoints are sources 1, 2, ... (ingest.exposition.join_sources)."""


def resets(tot: Totals, prev: EngineSignals | None, cur: EngineSignals) -> frozenset[int]:
    """The sources that restarted: a counter of theirs below its last seen value (even one seen before a
    gap). vLLM's counters, prompt-token sources and TTFT belong to vLLM's body; each evidence series to the
    body that declared it. A restart of one source never resets another's counters (no double count)."""
    out: set[int] = set()
    if (
        went_down(tot.raw, cur.counters)
        or went_down(tot.raw_by_source, cur.prompt_tokens_by_source)
        or (prev and prev.ttft and cur.ttft and cur.ttft.count < prev.ttft.count)
    ):
        out.add(VLLM_SOURCE)
    last, origin = tot.raw_evidence, cur.evidence_origin
    for k, v in cur.evidence.items():
        if k in last and v < last[k]:
            out.add(origin.get(k, VLLM_SOURCE))
    return frozenset(out)


def accumulate_by(
    prev_tot: Mapping[K, float],
    prev_raw: Mapping[K, float],
    raw: Mapping[K, float],
    resets: frozenset[int],
    origin: Mapping[K, int],
) -> dict[K, float]:
    """`_accumulate` where each series resets only with its own source."""
    if not resets:
        return accumulate(prev_tot, prev_raw, raw, False)
    if resets == {VLLM_SOURCE} and not origin:
        return accumulate(prev_tot, prev_raw, raw, True)
    out: dict[K, float] = dict(prev_tot)
    for k, v in raw.items():
        if k in prev_tot and k in prev_raw:
            total = prev_tot[k] + (v if origin.get(k, VLLM_SOURCE) in resets else v - prev_raw[k])
            out[k] = total if total - total == 0.0 else v
        else:
            out[k] = v
    return out


def store_base(tot: Totals, resets: frozenset[int], origin: Mapping[EvidenceKey, int]) -> Mapping[EvidenceKey, float]:
    """Stores at each source's last restart: a restarted source's series start over from their totals."""
    if not resets:
        return tot.evidence_store_base
    base = dict(tot.evidence_store_base)
    for k, v in stores(tot.evidence).items():
        if origin.get(k, VLLM_SOURCE) in resets:
            base[k] = v
    return base


def missing(
    tot: Totals, raw_evidence: Mapping[EvidenceKey, float], cur: EngineSignals, resets: frozenset[int]
) -> tuple[frozenset[EvidenceKey], frozenset[EvidenceKey]]:
    """(series seen before and absent now, series a restart of their source excused), cheap when none is."""
    if len(raw_evidence) == len(cur.evidence) and not tot.forgiven:
        return frozenset(), frozenset()
    absent = {k for k in raw_evidence if k not in cur.evidence}
    origin = tot.origin
    forgiven = (tot.forgiven & absent) | {k for k in absent if origin.get(k, VLLM_SOURCE) in resets}
    return frozenset(absent - forgiven), frozenset(forgiven)


def accumulate(
    prev_tot: Mapping[K, float], prev_raw: Mapping[K, float], raw: Mapping[K, float], reset: bool
) -> dict[K, float]:
    """New totals; a counter absent from this scrape keeps its total (a gap, not a zero)."""
    out: dict[K, float] = dict(prev_tot)
    for k, v in raw.items():
        if k in prev_tot and k in prev_raw:
            total = prev_tot[k] + (v if reset else v - prev_raw[k])
            out[k] = total if total - total == 0.0 else v  # an overflowed total restarts from the raw value
        else:
            out[k] = v
    return out


__all__ = ["VLLM_SOURCE", "accumulate", "accumulate_by", "missing", "resets", "store_base", "stores", "went_down"]

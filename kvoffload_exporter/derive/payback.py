"""Is the tier worth its RAM? Prefill seconds the tier saved per GiB-hour it was held, and what to do.

Pure (docs/memory.md has the formula, the rules and a worked example from the H200 runs):

    payback = (loaded tokens × prefill seconds per token − load seconds) / (tier GiB × window hours)

Loaded tokens are the window's external prefix-cache hits (tokens the connector supplied instead of a
prefill); the prefill cost per token is measured, never assumed: by the exporter from the engine's
own per-request prefill counters (`derive.prefill_cost`), by `check` from its control path
((recompute TTFT − GPU-hit TTFT) / prefix tokens). Unknown inputs give no figure (absent, not 0).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NotRequired, TypedDict

from kvoffload_exporter.derive.capacity import GIB, gpu_pool_tokens, snapshot_tier_bytes
from kvoffload_exporter.derive.window import EngineDerived, interval, prefill_cost
from kvoffload_exporter.enums import Recommendation, Signal
from kvoffload_exporter.ingest.exposition import ParseError, info_number
from kvoffload_exporter.ingest.normalise import normalise
from kvoffload_exporter.ingest.snapshot import EngineKey, EngineSignals, Snapshot

HOUR = 3600.0
SHRINK_REUSE_FRACTION = 0.05
"""Shrink when the bytes loaded back over the window are below this share of the tier's size."""


@dataclass(frozen=True)
class Payback:
    """One engine's payback over a window and the recommendation that follows from it."""

    seconds_per_gib_hour: float
    saved_seconds: float  # loaded tokens × prefill cost − load seconds, over the window
    action: Recommendation
    why: str

    @property
    def seconds_per_byte_second(self) -> float:
        """The same figure in base units (what the exporter exports): seconds saved per byte held for a second."""
        return self.seconds_per_gib_hour / (GIB * HOUR)


def payback_seconds_per_gib_hour(
    loaded_tokens: float, seconds_per_token: float | None, load_seconds: float, tier_bytes: float | None, window: float
) -> float | None:
    """The formula; None when the cost per token or the tier is unknown or the window is empty."""
    if seconds_per_token is None or not tier_bytes or tier_bytes <= 0 or window <= 0:
        return None
    v = (loaded_tokens * seconds_per_token - load_seconds) / (tier_bytes / GIB * window / HOUR)
    return v if v - v == 0.0 else None


@dataclass(frozen=True)
class TierUse:
    """What the rules look at besides the payback (None: unknown, the rule does not fire)."""

    loaded_tokens: float
    load_bytes: float | None
    tier_bytes: float
    tier_tokens: float | None
    gpu_pool_tokens: float | None


def recommend(payback: float, use: TierUse) -> tuple[Recommendation, str]:
    """disable → grow → shrink → keep, first rule that fires (docs/memory.md)."""
    if payback < 0 and use.loaded_tokens > 0:
        return Recommendation.DISABLE, "loads cost more time than the prefill they replace"
    if payback > 0 and use.tier_tokens is not None and use.gpu_pool_tokens and use.tier_tokens < use.gpu_pool_tokens:
        return Recommendation.GROW, (
            f"the tier ({use.tier_tokens:,.0f} tokens) is smaller than the GPU pool ({use.gpu_pool_tokens:,.0f}): "
            "what the GPU evicts is rarely still in it"
        )
    if use.load_bytes is not None and use.load_bytes < SHRINK_REUSE_FRACTION * use.tier_bytes:
        return Recommendation.SHRINK, (
            f"loaded {use.load_bytes / GIB:.2f} GiB over the window, under {SHRINK_REUSE_FRACTION:.0%} of the "
            f"{use.tier_bytes / GIB:.2f} GiB tier"
        )
    return Recommendation.KEEP, "loads save more prefill time than they cost"


def _tier_use(d: EngineDerived, e: EngineSignals, tier: float) -> TierUse:
    loaded = d.deltas.get(Signal.EXTERNAL_PREFIX_HITS, 0.0)
    load_bytes = d.deltas.get(Signal.OFFLOAD_LOAD_BYTES)
    tier_tokens = info_number(e.offload_config.get("cpu_kv_cache_size_tokens"))
    if tier_tokens is None and load_bytes and loaded > 0:
        tier_tokens = tier / (load_bytes / loaded)  # bytes per token from the loads themselves
    return TierUse(loaded, load_bytes, tier, tier_tokens, gpu_pool_tokens(e))


def engine_payback(d: EngineDerived, e: EngineSignals, tier_bytes: float | None) -> Payback | None:
    """The exporter's figure for one engine over its window; None when any input is unknown."""
    if not d.configured or not tier_bytes:
        return None
    loaded = d.deltas.get(Signal.EXTERNAL_PREFIX_HITS)
    load_s = d.deltas.get(Signal.OFFLOAD_LOAD_SECONDS)
    if loaded is None or load_s is None:
        return None
    pb = payback_seconds_per_gib_hour(loaded, d.prefill_seconds_per_token, load_s, tier_bytes, d.window_seconds)
    if pb is None or d.prefill_seconds_per_token is None:
        return None
    action, why = recommend(pb, _tier_use(d, e, tier_bytes))
    return Payback(pb, loaded * d.prefill_seconds_per_token - load_s, action, why)


class CheckRecommendation(TypedDict):
    """`check`'s `recommendation` (`check_recommendation`): a model, evidence for the one advice."""

    payback_seconds_per_gib_hour: float | None
    prefill_seconds_per_token: float
    prefill_cost_from: str
    saved_seconds: float
    action: str
    why: str
    model_only: NotRequired[bool]


def _median(ttft: Mapping[str, Mapping[str, float | None] | None], path: str) -> float | None:
    s = ttft.get(path)
    median = s.get("median") if s else None
    return None if median is None else float(median)


def _offload_hit_tokens(phases: Sequence[Mapping[str, object]]) -> float | None:
    for ph in phases:
        tokens = ph.get("external_hit_tokens")
        if ph.get("phase") == "offload_revisit" and tokens and isinstance(tokens, int | float):
            return float(tokens)
    return None


def _control_cost(
    ttft: Mapping[str, Mapping[str, float | None] | None], phases: Sequence[Mapping[str, object]]
) -> float | None:
    """(recompute TTFT − GPU-hit TTFT) / prefix tokens: the marginal prefill cost the tier avoids."""
    rec, gpu = _median(ttft, "recompute"), _median(ttft, "gpu_hit")
    tokens = _offload_hit_tokens(phases)
    if rec is None or gpu is None or not tokens:
        return None
    return max(0.0, rec - gpu) / tokens


def _scrapes(before: str | None, after: str | None) -> tuple[Snapshot, Snapshot] | None:
    if before is None or after is None:
        return None
    try:
        return normalise(before), normalise(after)
    except ParseError:
        return None


def _summed(derived: Mapping[EngineKey, EngineDerived]) -> tuple[dict[Signal, float], dict[str, float]]:
    deltas: dict[Signal, float] = {}
    by_source: dict[str, float] = {}
    for d in derived.values():
        for k, v in d.deltas.items():
            deltas[k] = deltas.get(k, 0.0) + v
        for src, v in d.by_source.items():
            by_source[src] = by_source.get(src, 0.0) + v
    return deltas, by_source


# Any: the check document (canary/check/document.py types it): derive sits below canary and cannot import it.
def check_recommendation(doc: Mapping[str, Any], before: str | None, after: str | None) -> CheckRecommendation | None:
    """`check`'s `recommendation` key over the check's own run (its canary traffic, between the scrapes
    `before` and `after`): the prefill cost from the control path, else from the engine's counters.
    The action needs only the sign of the saving; grow and shrink by reuse need the workload, so only
    the gauge gives them. None without a measured cost or a loads counter; the figure is None when the
    tier size is unknown."""
    scrapes = _scrapes(before, after)
    if scrapes is None:
        return None
    deltas, by_source = _summed(interval(*scrapes))
    loaded, load_s = deltas.get(Signal.EXTERNAL_PREFIX_HITS), deltas.get(Signal.OFFLOAD_LOAD_SECONDS)
    cost, source = _control_cost(doc.get("ttft_seconds") or {}, doc.get("phase_summary") or []), "control"
    if cost is None:
        cost, source = prefill_cost(deltas, by_source), "engine_counters"
    if cost is None or loaded is None or load_s is None:
        return None
    saved = loaded * cost - load_s
    tier = snapshot_tier_bytes(scrapes[1], None)
    pb = payback_seconds_per_gib_hour(loaded, cost, load_s, tier, float(doc.get("duration_seconds") or 0))
    if loaded <= 0:
        action, why = Recommendation.SHRINK, "the run loaded nothing from the tier"
    elif saved < 0:
        action = Recommendation.DISABLE
        why = f"loads cost {-saved / loaded * 1e6:.3g} us/token more than the {cost * 1e6:.3g} us/token prefill"
    else:  # one prefill figure: the saving is the part of it the load did not take
        action = Recommendation.KEEP
        why = (
            f"loads saved {saved / loaded * 1e6:.3g} of the {cost * 1e6:.3g} us/token prefill (the load took the rest)"
        )
    return {
        "payback_seconds_per_gib_hour": None if pb is None else round(pb, 6),
        "prefill_seconds_per_token": round(cost, 9),
        "prefill_cost_from": source,
        "saved_seconds": round(saved, 6),
        "action": str(action),
        "why": why,
    }


__all__ = [
    "GIB",
    "SHRINK_REUSE_FRACTION",
    "CheckRecommendation",
    "Payback",
    "TierUse",
    "check_recommendation",
    "engine_payback",
    "payback_seconds_per_gib_hour",
    "recommend",
]

"""What the exporter concludes per engine, computed once when a target's view is built: the state's
reason, the tier's known size and the tier's payback. Pure (the derivation stage after `derive`).

`TargetView` is the derived snapshot the collector renders: the poll's outcome, the windowed
derivations and, per engine, its `EngineFindings`. The findings are recomputed whenever a view is
built (a poll, or canary facts arriving through `dataclasses.replace`), never while rendering.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from kvoffload_exporter.derive.capacity import Capacity, config_warnings, kv_capacity, snapshot_tier_bytes, tier_bytes
from kvoffload_exporter.derive.convoy import ConvoyView
from kvoffload_exporter.derive.payback import Payback, engine_payback
from kvoffload_exporter.derive.reasons import CanaryFacts, explain
from kvoffload_exporter.derive.window import EngineDerived
from kvoffload_exporter.enums import ConfigWarning, StateReason
from kvoffload_exporter.ingest.backends.resolve import unit_bytes
from kvoffload_exporter.ingest.backends.schema import NativeUnit
from kvoffload_exporter.ingest.exposition import info_number
from kvoffload_exporter.ingest.snapshot import EngineKey, EngineSignals, Snapshot


@dataclass(frozen=True)
class EngineFindings:
    """One engine's conclusions over its window (None: unknown or nothing to say)."""

    reason: StateReason | None = None
    tier_bytes: float | None = None  # exported, else the target's `tier_bytes` setting; None without offload
    payback: Payback | None = None
    gpu_blocks: float | None = None  # cache_config_info num_gpu_blocks
    block_size: float | None = None  # cache_config_info block_size (tokens)
    unit_bytes: Mapping[tuple[NativeUnit, str], float] = field(default_factory=dict)  # {(unit, basis): bytes}
    capacity: Capacity = ()  # (tier, basis, tokens): the GPU pool and the CPU tier, from the first poll
    warnings: tuple[ConfigWarning, ...] | None = None  # config facts alone; None: no offload configured


def engine_findings(
    d: EngineDerived | None,
    e: EngineSignals,
    snapshot: Snapshot,
    families: frozenset[str],
    configured_tier: float | None,
    canary: CanaryFacts | None,
) -> EngineFindings:
    """The reason, tier bytes and payback of one engine (no window yet: none of the windowed ones), and
    the cache facts read from its info labels."""
    known = tier_bytes(e, configured_tier)
    capacity = kv_capacity(e, configured_tier, snapshot.offload_configured)
    return EngineFindings(
        reason=explain(d, e, families, canary, known) if d is not None else None,
        tier_bytes=known if snapshot.offload_configured else None,
        payback=engine_payback(d, e, known) if d is not None else None,
        gpu_blocks=info_number(e.cache_config.get("num_gpu_blocks")),
        block_size=info_number(e.cache_config.get("block_size")),
        unit_bytes=unit_bytes(e.evidence_gauges, e.cache_config),
        capacity=capacity,
        warnings=config_warnings(capacity) if snapshot.offload_configured else None,
    )


@dataclass(frozen=True)
class TargetView:
    """One target as the collector renders it; `engines` is filled from the rest when it is built."""

    label: str
    url: str
    up: bool = False
    errors: Mapping[str, int] = field(default_factory=dict)
    duration: float | None = None
    body_bytes: int | None = None
    last_success: float | None = None
    version: str | None = None
    snapshot: Snapshot | None = None
    derived: Mapping[EngineKey, EngineDerived] = field(default_factory=dict)
    tier_bytes: float | None = None  # from the exporter config
    last_error: str | None = None
    extra_errors: Mapping[str, int] | None = None  # failed extra_metrics_urls fetches; None: none configured
    canary: CanaryFacts | None = None  # what the canary learnt about this target, refines the reasons
    convoy: Mapping[EngineKey, ConvoyView] = field(
        default_factory=dict
    )  # kvoffload_exporter/derive/convoy.py, windowed
    # Not polled yet: nothing is exported for it. Its `up` would read 0 though no poll failed, and a restarted
    # exporter would look, for up to one poll timeout, as if it could not reach its targets.
    pending: bool = False
    engines: Mapping[EngineKey, EngineFindings] = field(init=False, default_factory=dict)

    def __post_init__(self) -> None:
        snap = self.snapshot
        found: dict[EngineKey, EngineFindings] = {}
        if snap is not None:
            for e in snap.engines:
                d = self.derived.get(e.key)
                found[e.key] = engine_findings(d, e, snap, snap.families, self.tier_bytes, self.canary)
        object.__setattr__(self, "engines", found)

    @property
    def total_tier_bytes(self) -> float | None:
        """Σ tier bytes over the target's engines (each DP engine pins its own tier); None when unknown."""
        return snapshot_tier_bytes(self.snapshot, self.tier_bytes)


__all__ = ["EngineFindings", "TargetView", "engine_findings"]

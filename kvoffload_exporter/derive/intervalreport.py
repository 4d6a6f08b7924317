"""`inspect`'s interval report: what two `/metrics` dumps say happened between them, as a JSON document; pure.

Used by `inspect BEFORE AFTER --json`, by `check` (the whole run's counters between its first and closing
scrapes) and by the tests that replay real capture chains.
"""

from __future__ import annotations

from typing import Any

from kvoffload_exporter.derive.capacity import tier_bytes
from kvoffload_exporter.derive.reasons import explain
from kvoffload_exporter.derive.window import EngineDerived, interval
from kvoffload_exporter.ingest.snapshot import Signal, Snapshot

_FIELDS = (
    (Signal.OFFLOAD_LOAD_BYTES, "load B"),
    (Signal.OFFLOAD_STORE_BYTES, "store B"),
    (Signal.OFFLOAD_LOAD_SECONDS, None),
    (Signal.OFFLOAD_STORE_SECONDS, None),
    (Signal.GPU_PREFIX_QUERIES, None),
    (Signal.GPU_PREFIX_HITS, "GPU hit tok"),
    (Signal.EXTERNAL_PREFIX_QUERIES, None),
    (Signal.EXTERNAL_PREFIX_HITS, "ext hit tok"),
    (Signal.PROMPT_TOKENS, None),
)

_CACHE_KEYS = (
    "block_size",
    "num_gpu_blocks",
    "enable_prefix_caching",
    "kv_offloading_size",
    "kv_offloading_backend",
    "kv_cache_size_tokens",
)


def _finite(v: float | None) -> float | None:
    """As is, or None where undefined or not finite: `--json` must be JSON (no NaN/Infinity)."""
    return None if v is None or v - v != 0.0 else v


def _r(v: float | None) -> float | None:
    """Rounded, and None where undefined or not finite: `--json` must be JSON (no NaN/Infinity)."""
    return None if v is None or v - v != 0.0 else round(v, 6)


# Any: a JSON document whose engine rows carry one key per Signal (`_FIELDS`), read back by inspect and check.
def report(before: Snapshot | None, after: Snapshot) -> dict[str, Any]:
    """The `--json` document (also used by tests and `check`); `before` None: one dump, whose cumulative
    counters are reported without a state (a state is a claim about a window, and one dump has none)."""
    engines = []
    derived = interval(before, after)
    for e in after.engines:
        d: EngineDerived = derived[e.key]
        # Any: an engine row: a key per Signal of `_FIELDS`, and nested facts
        row: dict[str, Any] = {"model_name": e.model_name, "engine": e.engine}
        for k, _ in _FIELDS:
            row[k] = _finite(d.deltas.get(k))
        row["prompt_tokens_by_source"] = {k: _finite(v) for k, v in d.by_source.items()}
        # One dump is one sample: no window, so no state (as `serve` before an engine's second poll).
        row["state"] = d.state if before is not None and d.state_known else None
        reason = explain(d, e, after.families, tier_bytes=tier_bytes(e, None)) if before is not None else None
        row["state_reason"] = reason  # None: nothing to explain, or no state
        row["load_store_ratio"] = _r(d.load_store_ratio)
        row["load_bandwidth_bytes_per_second"] = _r(d.load_bandwidth)
        row["store_bandwidth_bytes_per_second"] = _r(d.store_bandwidth)
        row["gpu_prefix_hit_ratio"] = _r(d.gpu_hit_ratio)
        row["external_prefix_hit_ratio"] = _r(d.external_hit_ratio)
        row["ttft_seconds"] = {str(q): _r(v) for q, v in d.ttft_quantiles.items()}
        row["ttft_count"] = _finite(d.ttft_count)  # the requests the quantiles come from
        row["cache_config"] = {k: v for k, v in e.cache_config.items() if k in _CACHE_KEYS}
        row["load_store_ratio_unit"] = d.ratio_unit
        row["evidence"] = _evidence(d)
        engines.append(row)
    return {
        "mode": "interval" if before is not None else "cumulative",
        "backends": list(after.backends),
        "sources": [{"signal": s, "resolved_name": n, "unit": u} for s, n, u in after.sources],
        "generation": after.generation,
        "multiprocess": after.multiprocess,
        "engines": engines,
        "second_endpoint_missing": second_endpoint_missing(after, engines),
    }


# Any: the engine rows of `report`
def second_endpoint_missing(after: Snapshot, engines: list[dict[str, Any]]) -> str | None:
    """Why a file shows prefix hits from outside but no offload counters: the backend keeps them on a second
    endpoint (Dynamo KVBM, the LMCache MP server) whose dump was not joined with `+`. None otherwise."""
    if {"stored", "loaded"} & {s for s, _, _ in after.sources}:
        return None
    lmcache = "lmcache_mp" in after.backends or any(
        e["cache_config"].get("kv_offloading_backend") == "lmcache" for e in engines
    )
    outside = any((e.get("external_prefix_hits") or 0) > 0 for e in engines)
    join = "join its dump with +: inspect before.prom+second-before.prom after.prom+second-after.prom"
    if lmcache:
        return f"the LMCache MP server keeps the stored/loaded counters on its own /metrics, not in this file; {join}"
    if outside:
        return (
            "external prefix hits but no offload counters in this file: if the connector keeps them on a second "
            f"endpoint (Dynamo KVBM's metrics port, the LMCache MP server), {join}"
        )
    return None


def _evidence(d: EngineDerived) -> list[dict[str, object]]:
    """Evidence series in the one schema: deltas for cumulative signals, last values for the others."""
    rows = [(k, v, True) for k, v in d.evidence.items()] + [(k, v, False) for k, v in d.evidence_gauges.items()]
    return [
        {
            "signal": k.signal,
            "unit": k.unit,
            "tier": k.tier,
            "connector": k.connector,
            "reason": k.reason,
            "detail": k.detail,
            "delta" if delta else "value": _finite(v),
        }
        for k, v, delta in sorted(rows, key=lambda r: tuple(r[0]))
    ]


__all__ = ["report", "second_endpoint_missing"]

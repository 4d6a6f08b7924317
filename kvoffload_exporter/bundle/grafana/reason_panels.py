"""Overview rows "Why no loads?" and "Payoff under load": state reasons, per-engine imbalance, the tier's
retention horizon, the canary's ΔTTFT by load band and the passive convoy view.

Kept apart from the rest of the overview so the rows can move as a block; `dashboards.overview()` calls
`add()` once. `panels.finish` appends the metric names and the `serve --canary.enabled` note to descriptions.
"""

from __future__ import annotations

from kvoffload_exporter.bundle.alerting.promql import Query
from kvoffload_exporter.bundle.grafana.panels import Layout, mt, state_timeline, targets, timeseries
from kvoffload_exporter.catalogue import STATE_REASONS
from kvoffload_exporter.enums import StateReason as R

REASON_VALUES: dict[R, tuple[int, str]] = {
    R.METRIC_MISSING: (1, "red"),
    R.WARMING_UP: (2, "orange"),
    R.TIER_SMALLER_THAN_PREFIX: (3, "light-purple"),
    R.STORES_SKIPPED: (4, "light-yellow"),
    R.STORES_DROPPED: (5, "yellow"),
    R.TIER_SMALLER_THAN_GPU_POOL: (6, "purple"),
    R.PREFIX_SHORTER_THAN_BLOCK: (7, "blue"),
    R.LOADS_SKIPPED_BY_REQUEST: (8, "dark-orange"),
    R.EVICTED_BEFORE_REUSE: (9, "dark-red"),
    R.NO_REUSE_IN_WORKLOAD: (10, "text"),
    R.LOOKUP_ALWAYS_MISSES: (11, "dark-purple"),
    R.STORE_ERRORS: (12, "dark-yellow"),
    R.SERVED_BY_ANOTHER_CONNECTOR: (13, "light-blue"),
    R.PROMOTION_FAILURES: (14, "dark-blue"),
    R.LOAD_ERRORS: (15, "semi-dark-red"),
}
"""Each reason's explicit value in the reason timeline (0: nothing to explain) and colour; never its
position in the enum, so a new reason does not renumber the others. A reason missing here fails the build."""


def reason_values() -> dict[R, tuple[int, str]]:
    """REASON_VALUES for every reason of the enum; values unique and above 0 (checked here)."""
    out = {r: REASON_VALUES[r] for r in STATE_REASONS}
    values = [v for v, _ in out.values()]
    if len(set(values)) != len(values) or min(values) < 1:
        raise ValueError(f"reason timeline values must be unique and > 0: {values}")
    return out


def _why_no_loads(L: Layout, q: Query, eng: str) -> None:
    L.row("Why no loads?")
    reasons = reason_values()
    reason_expr = (
        "max without (reason) ("
        + " or ".join(f"{q('kvoffload_state_reason', mt('reason', '=', r))} * {v}" for r, (v, _) in reasons.items())
        + ")"
    )
    mappings = {0: ("nothing to explain", "green")}
    mappings.update({v: (r.replace("_", " "), color) for r, (v, color) in reasons.items()})
    L.add(
        state_timeline(
            "Why this engine stores without loading",
            "kvoffload_state_reason: the rule that explains a store_without_load or not_storing state (or "
            "a hit that loses stores); one section per reason in alerts/runbook.md (State reasons).",
            targets([(reason_expr, eng)]),
            mappings,
        ),
        w=24,
        h=6,
    )
    L.add(
        timeseries(
            "Per-engine offload loads vs stores (last hour)",
            "Bytes loaded and stored per engine (DP rank) over the last hour. One engine storing with its "
            "load line at 0 while its siblings load is KVOffloadEngineImbalance.",
            [
                (f"increase({q('kvoffload_load_bytes_total')}[1h])", f"load {eng}"),
                (f"increase({q('kvoffload_store_bytes_total')}[1h])", f"store {eng}"),
            ],
            "bytes",
            fill=0,
        ),
        w=12,
        h=8,
    )
    L.add(
        timeseries(
            "Tier retention horizon",
            "kvoffload_tier_retention_seconds: the largest idle time after which the canary's displaced "
            "prefix still loaded from the tier (wait strategy, recent cycles). Reuse that comes later than "
            "this misses the tier (reason evicted_before_reuse).",
            [(q("kvoffload_tier_retention_seconds"), "{{target}}")],
            "s",
            fill=0,
        ),
        w=12,
        h=8,
    )


def _payoff_under_load(L: Layout, q: Query, eng: str) -> None:
    L.row("Payoff under load")
    L.add(
        timeseries(
            "Canary ΔTTFT by load band",
            "Offload hit minus control TTFT medians per load band the canary cycles ran under (idle: no "
            "other request; low: fewer than 8 running, none waiting; high: otherwise). Above 0 in the "
            "band the target is in now is KVOffloadSlowerUnderLoad.",
            [(q("kvoffload_canary_band_delta_ttft_seconds"), "{{target}} {{load_band}} vs {{control}}")],
            "s",
            fill=0,
            thresholds_line=True,
        ),
        w=12,
        h=8,
    )
    L.add(
        timeseries(
            "Offload lookup delay p99",
            "p99 of how long a request's offload lookup stayed deferred over the window: loads queueing "
            "behind loads (the convoy of vllm#44294). vLLM 0.33+.",
            [(q("kvoffload_lookup_async_delay_seconds"), eng)],
            "s",
            fill=0,
        ),
        w=12,
        h=8,
    )
    L.add(
        timeseries(
            "Requests waiting on KV fetch by stage",
            "Waiting requests by async KV-load stage: waiting_to_start and in_progress growing together "
            "with the queue time means concurrent requests are serialised behind loads.",
            [(q("kvoffload_requests_kv_fetch"), f"{{{{stage}}}} {eng}")],
            "short",
            stack=True,
        ),
        w=12,
        h=8,
    )
    L.add(
        timeseries(
            "Queue time quantiles",
            "Request queue-time quantiles over the window (vllm:request_queue_time_seconds).",
            [(q("kvoffload_request_queue_time_seconds"), f"p{{{{quantile}}}} {eng}")],
            "s",
            fill=0,
        ),
        w=12,
        h=8,
    )


def add(L: Layout, q: Query, eng: str) -> None:
    _why_no_loads(L, q, eng)
    _payoff_under_load(L, q, eng)


__all__ = ["add"]

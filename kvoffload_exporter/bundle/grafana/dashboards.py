"""The two Grafana dashboards, built with grafanalib from catalogue names and post-processed for Grafana ≥ 10.

*KV offload overview* answers "is offloading paying off?"; *KV offload exporter health* says whether the
answer can be trusted. Every panel has a description naming its metrics, a unit and a `noValue`; uids
are fixed so links and provisioned copies stay stable. The building blocks are in panels.py; only these
two modules (and grafana_alerts) import grafanalib.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from kvoffload_exporter.bundle.alerting.promql import Matcher, counted_over
from kvoffload_exporter.bundle.grafana.grafana_json import dumps
from kvoffload_exporter.bundle.grafana.health_dashboard import HEALTH_UID, exporter_health
from kvoffload_exporter.bundle.grafana.panels import (
    RATIO_UNIT,
    UNITS,
    Ctx,
    Layout,
    dashboard,
    mt,
    stat,
    state_timeline,
    targets,
    timeseries,
    variables,
)
from kvoffload_exporter.bundle.grafana.resource_panels import capacity_row, memory_row
from kvoffload_exporter.catalogue import STATE_MEANINGS, STATES
from kvoffload_exporter.enums import State

OVERVIEW_UID = "kvoffload-overview"
GIB_HOUR_BYTE_SECONDS = 2**30 * 3600
"""Byte-seconds in a GiB-hour: the payback panel shows the exported base-unit figure per GiB-hour."""

STATE_VALUES: dict[State, tuple[int, str]] = {
    State.NOT_CONFIGURED: (0, "text"),
    State.IDLE: (1, "blue"),
    State.NOT_STORING: (2, "orange"),
    State.STORING: (3, "yellow"),
    State.STORE_WITHOUT_LOAD: (4, "red"),
    State.HIT: (5, "green"),
}
"""Each state's explicit value in the state timeline (never its position in the enum: a new state must not
renumber the ones stored in dashboards and screenshots) and colour; its meaning is catalogue.STATE_MEANINGS.
A state missing here or there fails the bundle build."""


def state_values() -> dict[State, tuple[int, str, str]]:
    """(value, colour, meaning) for every state of the enum, in enum order; values unique (checked here)."""
    out = {s: (*STATE_VALUES[s], STATE_MEANINGS[s]) for s in STATES}
    values = [v for v, _, _ in out.values()]
    if len(set(values)) != len(values):
        raise ValueError(f"state timeline values are not unique: {values}")
    return out


def _paying_off_row(L: Layout, c: Ctx, eng: str) -> None:
    """Is offloading paying off? The evidence state, the load/store ratio, traffic and bandwidth."""
    q = c.q
    L.row("Is offloading paying off?")
    states = state_values()
    state_expr = (
        "max without (state) ("
        + " or ".join(f"{q('kvoffload_state', mt('state', '=', s))} * {v}" for s, (v, _, _) in states.items() if v)
        + ")"
    )
    L.add(
        state_timeline(
            "Offload evidence state per engine",
            "Exporter's verdict per engine over its window (no value until the exporter polled the engine "
            "twice): "
            + "; ".join(f"{s.replace('_', ' ')} = {meaning}" for s, (_, _, meaning) in reversed(states.items()))
            + ".",
            targets([(state_expr, eng)]),
            {v: (s.replace("_", " "), color) for s, (v, color, _) in states.items()},
        ),
        w=24,
        h=6,
    )
    L.add(
        timeseries(
            "Load/store ratio",
            "Offload bytes loaded back ÷ bytes stored over the exporter window, a plain ratio (8.1 = each "
            "stored byte loaded 8.1 times). Near 0 with steady stores means the tier is written but never "
            "read; > 1 means stored blocks are reused several times.",
            [(q("kvoffload_load_store_ratio"), eng)],
            RATIO_UNIT,
            decimals=2,
        ),
        w=8,
        h=8,
    )
    L.add(
        timeseries(
            "Offload traffic",
            "Bytes per second moved between GPU KV cache and the offload tier "
            "(Prometheus rate of the exporter's de-duplicated counters; loads up, stores down).",
            [
                (f"rate({q('kvoffload_load_bytes_total')}[$__rate_interval])", f"load {eng}"),
                (f"-rate({q('kvoffload_store_bytes_total')}[$__rate_interval])", f"store {eng}"),
            ],
            "Bps",
        ),
        w=8,
        h=8,
    )
    L.add(
        timeseries(
            "Transfer bandwidth",
            "Bytes per transfer-second of loads and stores over the window (per-worker "
            "mean with TP > 1). H200 reference: ~38-47 GB/s host to device.",
            [
                (q("kvoffload_load_bandwidth_bytes_per_second"), f"load {eng}"),
                (q("kvoffload_store_bandwidth_bytes_per_second"), f"store {eng}"),
            ],
            "Bps",
        ),
        w=8,
        h=8,
    )


def _prefix_ttft_row(L: Layout, c: Ctx, eng: str) -> None:
    """Prefix cache hit ratios and the server's TTFT."""
    q = c.q
    L.row("Prefix cache and TTFT")
    L.add(
        timeseries(
            "GPU vs external prefix hit ratio",
            "Share of looked-up prompt tokens served from the GPU prefix "
            "cache and from the external (offload) cache over the window. From vLLM 0.16 the external ratio "
            "is a share of what the GPU cache missed.",
            [
                (q("kvoffload_gpu_prefix_hit_ratio"), f"GPU {eng}"),
                (q("kvoffload_external_prefix_hit_ratio"), f"external {eng}"),
            ],
            "percentunit",
        ),
        w=12,
        h=8,
    )
    L.add(
        timeseries(
            "Server TTFT quantiles",
            "Time to first token from vLLM's histogram over the exporter window "
            "(includes the queue wait while offloaded KV loads).",
            [(q("kvoffload_ttft_seconds"), f"q{{{{quantile}}}} {eng}")],
            "s",
        ),
        w=12,
        h=8,
    )


def _canary_row(L: Layout, c: Ctx, eng: str) -> None:
    """The canary: TTFT per path, ΔTTFT against the control, its verdict and output mismatches."""
    q = c.q
    L.row("Canary")
    L.add(
        timeseries(
            "Canary TTFT per path",
            "Client-side time to first token of the canary's probes: cold, GPU hit, "
            "offload hit, recompute and a no-offload control target (median of recent samples).",
            [(q("kvoffload_canary_ttft_seconds"), "{{target}} {{path}} q{{quantile}}")],
            "s",
        ),
        w=10,
        h=8,
    )
    L.add(
        timeseries(
            "ΔTTFT offload hit vs control",
            "TTFT(offload hit) − TTFT(control): above 0 (red line) offloading "
            "made the request slower than the control. H200 reference: +27.7 ms on Qwen3-0.6B (slower), "
            "−546 ms on Qwen3-32B (7x faster). Dashed: rank-sum CI bounds.",
            [
                (q("kvoffload_canary_delta_ttft_seconds"), "{{target}} vs {{control}}"),
                (q("kvoffload_canary_delta_ttft_ci_seconds"), "{{target}} vs {{control}} CI {{bound}}"),
            ],
            "s",
            thresholds_line=True,
            fill=0,
            overrides=[
                {
                    "matcher": {"id": "byFrameRefID", "options": "B"},
                    "properties": [{"id": "custom.lineStyle", "value": {"fill": "dash", "dash": [10, 10]}}],
                }
            ],
        ),
        w=10,
        h=8,
        steps=[("green", None), ("red", 0.0)],
    )
    L.add(
        stat(
            "Canary verdict",
            "The canary's conclusion per target: offload faster, offload slower, no offload "
            "hit on revisit, or inconclusive (confidence interval spans 0).",
            [(f"{q('kvoffload_canary_verdict')} == 1", "{{target}}: {{verdict}}")],
            "none",
            text_mode="name",
            color_mode="background",
            mappings=[],
        ),
        w=4,
        h=8,
        steps=[("blue", None)],
    )
    L.add(
        stat(
            "Canary output mismatches",
            "Offload hits whose answer (greedy token ids) differed from the same prompt served from the GPU or "
            "recomputed, over the dashboard's range. Anything above 0 is critical: the tier changes answers "
            "(alert KVOffloadOutputMismatch). No value while the model's answer does not depend on the prefix "
            "(kvoffload_canary_output_sensitive 0): the check cannot see a corruption then.",
            [
                (
                    "sum by (job, instance, target) "
                    f"({counted_over(q('kvoffload_canary_output_mismatches_total'), '$__range')}) and on (job, "
                    f"instance, target) max by (job, instance, target) ({q('kvoffload_canary_output_sensitive')}) == 1",
                    "{{target}}",
                )
            ],
            "none",
            color_mode="background",
            mappings=[],
        ),
        w=4,
        h=8,
        steps=[("green", None), ("red", 1.0)],
    )
    L.add(
        stat(
            "Integrity events",
            "Events the engines counted that may mean corrupted outputs, over the dashboard's range: nan_logits "
            "(requests with NaNs in their logits; only with VLLM_COMPUTE_NANS_IN_LOGITS=1) and "
            "notification_after_expiry (NIXL: KV blocks may have been reused before the transfer finished). "
            "Alert KVOffloadIntegrityRisk (warning); KVOffloadOutputMismatch is the canary's proof.",
            [
                (
                    "sum by (job, instance, target, kind) "
                    f"({counted_over(q('kvoffload_integrity_events_total'), '$__range')})",
                    "{{instance}} {{target}} {{kind}}",
                )
            ],
            "none",
            color_mode="background",
            mappings=[],
        ),
        w=4,
        h=8,
        steps=[("green", None), ("orange", 1)],
    )


def _backend_row(L: Layout, c: Ctx, eng: str) -> None:
    """The backends' own counters (bundle/grafana/backend_panels.py)."""
    q = c.q
    from kvoffload_exporter.bundle.grafana.backend_panels import backend_rows  # one focused hook; the row lives there

    backend_rows(L, q, eng)


def _tier_pressure_row(L: Layout, c: Ctx, eng: str) -> None:
    """Allocation failures, in-flight pinning and the tier's payback."""
    q = c.q
    L.row("Offload tier pressure")
    L.add(
        timeseries(
            "Allocation failures and skipped stores",
            "Store allocations that failed because the tier was full "
            "of in-flight chunks, and stores skipped by reuse gating (store_threshold ≥ 2), per second.",
            [
                (f"rate({q('kvoffload_allocation_failures_total')}[$__rate_interval])", f"failed {eng}"),
                (f"rate({q('kvoffload_stores_skipped_total')}[$__rate_interval])", f"skipped {eng}"),
            ],
            "cps",
        ),
        w=12,
        h=8,
    )
    L.add(
        timeseries(
            "Tier chunks pinned by in-flight transfers",
            "Share of offload-tier chunks held by transfers in "
            "flight. NOT the fill level (vLLM exports none); advisory in multiprocess mode.",
            [(q("kvoffload_tier_in_flight_ratio"), eng)],
            "percentunit",
        ),
        w=12,
        h=8,
    )
    L.add(
        timeseries(
            "Is the tier worth its RAM?",
            "Prefill seconds the tier saved per GiB-hour it was held, over the exporter's window: (loaded tokens "
            "x measured prefill cost per token - load seconds) / (tier GiB x window hours), from the exported "
            "seconds per byte-second x 2^30 x 3600. Below 0 with loads: "
            "disable; kvoffload_recommendation says grow/keep/shrink/disable (rules in docs/memory.md). "
            "Absent while the tier size or the prefill cost is unknown.",
            [(f"{q('kvoffload_payback_seconds_per_byte_second')} * {GIB_HOUR_BYTE_SECONDS}", f"payback {eng}")],
            "s",
        ),
        w=24,
        h=8,
    )


def _reason_row(L: Layout, c: Ctx, eng: str) -> None:
    """Why an engine stores without loading (bundle/grafana/reason_panels.py)."""
    q = c.q
    from kvoffload_exporter.bundle.grafana import reason_panels  # imports panels.py only; kept out of this length

    reason_panels.add(L, q, eng)


OVERVIEW_ROWS: tuple[Callable[[Layout, Ctx, str], None], ...] = (
    _paying_off_row,
    _prefix_ttft_row,
    _canary_row,
    memory_row,
    capacity_row,
    _backend_row,
    _tier_pressure_row,
    _reason_row,
)
"""The overview's rows, top to bottom: one builder each."""


def overview(selectors: Sequence[Matcher] = ()) -> dict[str, object]:
    c = Ctx.of(selectors)
    eng = "{{target}} {{model_name}} e{{engine}}"
    L = Layout()
    for row in OVERVIEW_ROWS:
        row(L, c, eng)
    return dashboard(
        "KV offload overview",
        OVERVIEW_UID,
        "Is vLLM KV-cache offloading paying off? Evidence state, load/store ratio, bandwidth, hit ratios, "
        "TTFT, canary ΔTTFT and memory headroom, from kvoffload-exporter.",
        L,
        variables(c, engine_vars=True),
    )


DASHBOARDS = {"kvoffload-overview.json": overview, "kvoffload-exporter-health.json": exporter_health}


def render(selectors: Sequence[Matcher] = ()) -> dict[str, str]:
    return {f"dashboards/{name}": dumps(fn(selectors)) for name, fn in DASHBOARDS.items()}


__all__ = ["DASHBOARDS", "HEALTH_UID", "OVERVIEW_UID", "UNITS", "render"]

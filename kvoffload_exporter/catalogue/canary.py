"""Canary results (kvoffload_exporter/canary/expose.py); absent unless `serve --canary.enabled` runs."""

from __future__ import annotations

from kvoffload_exporter.catalogue.metric import Metric
from kvoffload_exporter.enums import Group, MetricType, Unit

METRICS: tuple[Metric, ...] = (
    Metric(
        name="kvoffload_canary_ttft_seconds",
        type=MetricType.SUMMARY,
        help="Client-side canary TTFT (first token-bearing SSE event) per path: quantiles of recent samples; "
        "_count and _sum over every counted sample since start.",
        labels=("target", "path", "quantile"),
        unit=Unit.SECONDS,
        group=Group.CANARY,
    ),
    Metric(
        name="kvoffload_canary_delta_ttft_seconds",
        type=MetricType.GAUGE,
        help="TTFT(offload hit) - TTFT(control) medians; positive means offloading made it slower.",
        labels=("target", "control"),
        unit=Unit.SECONDS,
        group=Group.CANARY,
    ),
    Metric(
        name="kvoffload_canary_delta_ttft_ci_seconds",
        type=MetricType.GAUGE,
        help="Confidence-interval bound of the canary delta TTFT (rank-sum over rounds).",
        labels=("target", "control", "bound"),
        unit=Unit.SECONDS,
        group=Group.CANARY,
    ),
    Metric(
        name="kvoffload_canary_probes_total",
        type=MetricType.COUNTER,
        help="Canary revisit probes by classification.",
        labels=("target", "result"),
        group=Group.CANARY,
    ),
    Metric(
        name="kvoffload_canary_cycles_total",
        type=MetricType.COUNTER,
        help="Canary cycles by result reason.",
        labels=("target", "reason"),
        group=Group.CANARY,
    ),
    Metric(
        name="kvoffload_canary_errors_total",
        type=MetricType.COUNTER,
        help="Failed canary cycles and preparations, once each, by closed reason (an answer of the wrong type, "
        "too deep or non-finite, an HTTP or connection failure, a preflight refusal, an internal error).",
        labels=("target", "reason"),
        group=Group.CANARY,
    ),
    Metric(
        name="kvoffload_canary_up",
        type=MetricType.GAUGE,
        help="1 while the canary runs and its last cycle or preparation succeeded; 0 after a failure, or "
        "while its loop restarts.",
        labels=("target",),
        group=Group.CANARY,
    ),
    Metric(
        name="kvoffload_canary_restarts_total",
        type=MetricType.COUNTER,
        help="Times the canary's loop failed and was restarted (with back-off).",
        labels=("target",),
        group=Group.CANARY,
    ),
    Metric(
        name="kvoffload_canary_tokens_spent_total",
        type=MetricType.COUNTER,
        help="Prompt + generated tokens spent by canaries.",
        labels=("target",),
        unit=Unit.TOKENS,
        group=Group.CANARY,
    ),
    Metric(
        name="kvoffload_canary_budget_remaining_tokens",
        type=MetricType.GAUGE,
        help="Canary token budget left in the current hour.",
        labels=("target",),
        unit=Unit.TOKENS,
        group=Group.CANARY,
    ),
    Metric(
        name="kvoffload_canary_last_success_timestamp_seconds",
        type=MetricType.GAUGE,
        help="Unix time of the last canary cycle that completed without error.",
        labels=("target",),
        unit=Unit.SECONDS,
        group=Group.CANARY,
    ),
    Metric(
        name="kvoffload_canary_residency_seconds",
        type=MetricType.GAUGE,
        help="Longest idle time after which a canary prefix was still reused from that tier (wait strategy).",
        labels=("target", "tier"),
        unit=Unit.SECONDS,
        group=Group.CANARY,
    ),
    Metric(
        name="kvoffload_canary_band_delta_ttft_seconds",
        type=MetricType.GAUGE,
        help="Canary delta TTFT (offload hit - control medians) over the cycles run under one load band "
        "(idle: no other request; low: < 8 running, none waiting; high: otherwise); serve --canary.enabled only.",
        labels=("target", "control", "load_band"),
        unit=Unit.SECONDS,
        group=Group.CANARY,
    ),
    Metric(
        name="kvoffload_canary_band_delta_ttft_ci_seconds",
        type=MetricType.GAUGE,
        help="Confidence-interval bound of the per-load-band canary delta TTFT (rank-sum over rounds).",
        labels=("target", "control", "load_band", "bound"),
        unit=Unit.SECONDS,
        group=Group.CANARY,
    ),
    Metric(
        name="kvoffload_canary_band_cycles_total",
        type=MetricType.COUNTER,
        help="Canary cycles (without error) by the load band they ran under.",
        labels=("target", "load_band"),
        group=Group.CANARY,
    ),
    Metric(
        name="kvoffload_canary_load_band",
        type=MetricType.STATESET,
        help="Load band of the last canary cycle: users' running and waiting requests in its closing scrape.",
        labels=("target", "load_band"),
        group=Group.CANARY,
    ),
    Metric(
        name="kvoffload_tier_retention_seconds",
        type=MetricType.GAUGE,
        help="Retention horizon: the largest idle time after which a displaced canary prefix still loaded "
        "from the offload tier, over the recent wait-ladder revisits (absent until one did).",
        labels=("target",),
        unit=Unit.SECONDS,
        group=Group.CANARY,
    ),
    Metric(
        name="kvoffload_canary_output_compared_total",
        type=MetricType.COUNTER,
        help="Output check: answers of an offload hit compared with the same prompt served from the GPU prefix "
        "cache (offload_vs_gpu) or recomputed (offload_vs_recompute), greedy token ids; only while the answer "
        "is known to depend on the prefix (kvoffload_canary_output_sensitive 1).",
        labels=("target", "pair"),
        group=Group.CANARY,
    ),
    Metric(
        name="kvoffload_canary_output_mismatches_total",
        type=MetricType.COUNTER,
        help="Output check: compared answers of an offload hit that differ from the reference: the tier "
        "changed what the model answers (alert KVOffloadOutputMismatch).",
        labels=("target", "pair"),
        group=Group.CANARY,
    ),
    Metric(
        name="kvoffload_canary_output_sensitive",
        type=MetricType.GAUGE,
        help="1 when changing eight prefix tokens (the first, then an eighth apart) changed the canary's answer "
        "(the output check can see a corrupted prefix), 0 when it did not (comparisons are unverifiable); "
        "absent until measured.",
        labels=("target",),
        group=Group.CANARY,
    ),
    Metric(
        name="kvoffload_canary_verdict",
        type=MetricType.STATESET,
        help="Canary verdict: offload_faster, offload_slower, no_offload_hit, inconclusive or output_mismatch "
        "(an offload hit answered other tokens since start; before every speed verdict).",
        labels=("target", "verdict"),
        group=Group.CANARY,
    ),
)

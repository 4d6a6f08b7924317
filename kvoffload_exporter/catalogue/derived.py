"""Windowed derivations over the exporter's `--state.window` (computed in kvoffload_exporter/derive/window.py)."""

from __future__ import annotations

from collections.abc import Mapping

from kvoffload_exporter.catalogue.metric import ENGINE, WINDOWED, Metric
from kvoffload_exporter.enums import Group, MetricType, Recommendation, State, Unit


def _one_of(values: tuple[str, ...]) -> str:
    """`a, b or c`: a closed set named in a HELP text, from its enum (a new member shows up by itself)."""
    return f"{', '.join(values[:-1])} or {values[-1]}" if len(values) > 1 else "".join(values)


STATE_MEANINGS: Mapping[State, str] = {
    State.NOT_CONFIGURED: "the scrape has no offload families: no OffloadingConnector (or vLLM ≤ 0.15)",
    State.IDLE: "no offload bytes moved (a GPU-hit revisit, which computes only its last block, stays here)",
    State.NOT_STORING: "offload configured, more prompt tokens computed than one offload chunk (and at least "
    "1,024), nothing stored: the tier costs memory and can never help (H200: a 300 MB tier under 587 MB prompts)",
    State.STORING: "stores, no loads, no observable reuse (also the warm-up state: no stores older than the "
    "window yet)",
    State.STORE_WITHOUT_LOAD: "stores, no loads, while the workload shows reuse (GPU prefix hits, cache-hit "
    "tokens): the tier is written but never read (vllm-project/vllm#47890)",
    State.HIT: "loads happened: the tier served prefix hits",
}
"""What each value of `kvoffload_state`'s `state` label means: the one definition, from which the README's
state table and the overview dashboard's state panel are generated (derive.window.evidence_state holds the
rules). A state without a meaning fails the bundle build; tests/test_facts_states.py keeps copies out."""


METRICS: tuple[Metric, ...] = (
    Metric(
        name="kvoffload_state",
        type=MetricType.STATESET,
        help=f"Offload evidence state per engine over the window: {_one_of(tuple(State))} "
        "(kvoffload_exporter/derive/window.py); absent until the engine was polled twice (no window, no claim).",
        labels=(*ENGINE, "state"),
        group=Group.DERIVED,
    ),
    Metric(
        name="kvoffload_state_reason",
        type=MetricType.STATESET,
        help=f"Why the engine is in {State.STORE_WITHOUT_LOAD} or {State.NOT_STORING}, or why a {State.HIT} is "
        "degraded (closed set, one rule each: "
        "kvoffload_exporter/derive/reasons.py); every series 0 when nothing needs explaining.",
        labels=(*WINDOWED, "reason"),
        group=Group.DERIVED,
    ),
    Metric(
        name="kvoffload_load_store_ratio",
        type=MetricType.GAUGE,
        help="Offload load bytes / store bytes over the window (absent when nothing was stored).",
        labels=WINDOWED,
        unit=Unit.RATIO,
        group=Group.DERIVED,
    ),
    Metric(
        name="kvoffload_load_bandwidth_bytes_per_second",
        type=MetricType.GAUGE,
        help="Offload load bytes / load transfer seconds over the window (per-worker mean when TP > 1).",
        labels=WINDOWED,
        unit=Unit.BYTES_PER_SECOND,
        group=Group.DERIVED,
    ),
    Metric(
        name="kvoffload_store_bandwidth_bytes_per_second",
        type=MetricType.GAUGE,
        help="Offload store bytes / store transfer seconds over the window.",
        labels=WINDOWED,
        unit=Unit.BYTES_PER_SECOND,
        group=Group.DERIVED,
    ),
    Metric(
        name="kvoffload_gpu_prefix_hit_ratio",
        type=MetricType.GAUGE,
        help="GPU prefix-cache hit tokens / queried tokens over the window.",
        labels=WINDOWED,
        unit=Unit.RATIO,
        group=Group.DERIVED,
    ),
    Metric(
        name="kvoffload_external_prefix_hit_ratio",
        type=MetricType.GAUGE,
        help="External (offload) prefix-cache hit tokens / queried tokens over the window (from vLLM 0.16 a share "
        "of the tokens the GPU cache missed).",
        labels=WINDOWED,
        unit=Unit.RATIO,
        group=Group.DERIVED,
    ),
    Metric(
        name="kvoffload_ttft_seconds",
        type=MetricType.SUMMARY,
        help="Server-side time to first token quantiles over the window, interpolated from the vLLM histogram; "
        "_count and _sum are vLLM's own, cumulative.",
        labels=(*WINDOWED, "quantile"),
        unit=Unit.SECONDS,
        source="vllm:time_to_first_token_seconds",
        group=Group.DERIVED,
    ),
    Metric(
        name="kvoffload_prefill_seconds_per_token",
        type=MetricType.GAUGE,
        help="Measured prefill cost: prefill seconds / prefilled tokens over the window (a mean: includes each "
        "request's fixed step time; absent under 1,024 prefilled tokens).",
        labels=WINDOWED,
        unit=Unit.SECONDS,
        source="vllm:request_prefill_time_seconds_sum / vllm:request_prefill_kv_computed_tokens_sum",
        group=Group.DERIVED,
    ),
    Metric(
        name="kvoffload_payback_seconds_per_byte_second",
        type=MetricType.GAUGE,
        help="Is the tier worth its RAM: prefill seconds saved per byte of tier held for a second, (loaded tokens x "
        "prefill seconds per token - load seconds) / (tier bytes x window seconds); x 3865470566400 (2^30 x 3600) "
        "gives seconds per GiB-hour. Absent when an input is unknown or the window had too little prefill "
        "(docs/memory.md).",
        labels=WINDOWED,
        source="vllm:external_prefix_cache_hits, kv_offload_load_time, request_prefill_time_seconds, tier size",
        group=Group.DERIVED,
    ),
    Metric(
        name="kvoffload_recommendation",
        type=MetricType.STATESET,
        help=f"What to do with the tier over the window: {_one_of(tuple(Recommendation))} (rules in docs/memory.md).",
        labels=(*WINDOWED, "recommendation"),
        group=Group.DERIVED,
    ),
    Metric(
        name="kvoffload_lookup_async_delay_seconds",
        type=MetricType.SUMMARY,
        help="p99 over the window of the time a request's offload lookup stayed deferred (loads queueing "
        "behind loads: the convoy view), interpolated from the vLLM histogram; _count and _sum are vLLM's own, "
        "cumulative.",
        labels=(*WINDOWED, "quantile"),
        unit=Unit.SECONDS,
        source="vllm:kv_offload_lookup_async_delay_seconds",
        group=Group.DERIVED,
    ),
    Metric(
        name="kvoffload_request_queue_time_seconds",
        type=MetricType.SUMMARY,
        help="Request queue-time quantiles over the window, interpolated from the vLLM histogram; _count and _sum "
        "are vLLM's own, cumulative.",
        labels=(*WINDOWED, "quantile"),
        unit=Unit.SECONDS,
        source="vllm:request_queue_time_seconds",
        group=Group.DERIVED,
    ),
    Metric(
        name="kvoffload_window_seconds",
        type=MetricType.GAUGE,
        help="Time actually covered by the window's first and last polls.",
        labels=WINDOWED,
        unit=Unit.SECONDS,
        group=Group.DERIVED,
    ),
)

"""Exporter and target health: `up`, scrape errors by closed reason, collector health, build info."""

from __future__ import annotations

from kvoffload_exporter.catalogue.metric import Metric
from kvoffload_exporter.enums import Group, MetricType, Unit

METRICS: tuple[Metric, ...] = (
    Metric(
        name="kvoffload_up",
        type=MetricType.GAUGE,
        help="1 if the last poll of the vLLM target succeeded, else 0.",
        labels=("target",),
        source="GET /metrics",
        group=Group.HEALTH,
    ),
    Metric(
        name="kvoffload_target_info",
        type=MetricType.INFO,
        help="Target facts: vLLM version from /version and the offload metric generation seen (flat, "
        "transfer_type or none).",
        labels=("target", "vllm_version", "generation"),
        source="GET /version, /metrics",
        group=Group.HEALTH,
    ),
    Metric(
        name="kvoffload_scrape_errors_total",
        type=MetricType.COUNTER,
        help="Failed polls of a vLLM target by reason (closed set).",
        labels=("target", "reason"),
        group=Group.HEALTH,
    ),
    Metric(
        name="kvoffload_extra_endpoint_errors_total",
        type=MetricType.COUNTER,
        help="Failed fetches of a target's extra_metrics_urls (KVBM, LMCache MP server) by reason (closed "
        "set); the target stays up on vLLM's data. Only on targets that configure extra endpoints.",
        labels=("target", "reason"),
        source="GET extra_metrics_urls",
        group=Group.HEALTH,
    ),
    Metric(
        name="kvoffload_scrape_duration_seconds",
        type=MetricType.GAUGE,
        help="Duration of the last poll of the target.",
        labels=("target",),
        unit=Unit.SECONDS,
        group=Group.HEALTH,
    ),
    Metric(
        name="kvoffload_scrape_body_bytes",
        type=MetricType.GAUGE,
        help="Size of the last /metrics body read from the target.",
        labels=("target",),
        unit=Unit.BYTES,
        group=Group.HEALTH,
    ),
    Metric(
        name="kvoffload_last_success_timestamp_seconds",
        type=MetricType.GAUGE,
        help="Unix time of the last successful poll of the target.",
        labels=("target",),
        unit=Unit.SECONDS,
        group=Group.HEALTH,
    ),
    Metric(
        name="kvoffload_exporter_collector_success",
        type=MetricType.GAUGE,
        help="1 if the collector's last run succeeded (vllm: every target polled fine).",
        labels=("collector",),
        group=Group.HEALTH,
    ),
    Metric(
        name="kvoffload_exporter_collector_duration_seconds",
        type=MetricType.GAUGE,
        help="Duration of the collector's last run.",
        labels=("collector",),
        unit=Unit.SECONDS,
        group=Group.HEALTH,
    ),
    Metric(
        name="kvoffload_exporter_build_info",
        type=MetricType.INFO,
        help="Exporter version, source revision (12 hex digits or unknown) and Python version.",
        labels=("version", "revision", "python"),
        group=Group.HEALTH,
    ),
    Metric(
        name="kvoffload_exporter_poll_duration_seconds",
        type=MetricType.HISTOGRAM,
        help="Duration of polls of vLLM targets (fetch, parse, derive, render), all targets together.",
        unit=Unit.SECONDS,
        group=Group.HEALTH,
    ),
    Metric(
        name="kvoffload_exporter_poll_lag_seconds",
        type=MetricType.HISTOGRAM,
        help="How late polls started against their schedule (waiting for a poll slot or a busy loop).",
        unit=Unit.SECONDS,
        group=Group.HEALTH,
    ),
    Metric(
        name="kvoffload_exporter_redaction_secrets_evicted_total",
        type=MetricType.COUNTER,
        help="Secrets dropped from the process-wide redaction list at its cap of 4,096 (the oldest target "
        "credential first): a dropped secret is no longer removed from text. Above 0: fewer secrets or one process "
        "per fleet shard.",
        group=Group.HEALTH,
    ),
    Metric(
        name="kvoffload_exporter_render_duration_seconds",
        type=MetricType.GAUGE,
        help="Time the last merge of the exposition took (once per change, not per scrape).",
        unit=Unit.SECONDS,
        group=Group.HEALTH,
    ),
    Metric(
        name="kvoffload_exporter_event_loop_lag_seconds",
        type=MetricType.GAUGE,
        help="Worst lateness of the event loop waking a 500 ms timer over the last 10 s.",
        unit=Unit.SECONDS,
        group=Group.HEALTH,
    ),
    Metric(
        name="kvoffload_targets",
        type=MetricType.GAUGE,
        help="Targets known to the exporter: configured ones and those kept from /probe requests.",
        labels=("kind",),
        group=Group.HEALTH,
    ),
    Metric(
        name="kvoffload_targets_up",
        type=MetricType.GAUGE,
        help="Targets whose last poll succeeded: configured ones and those kept from /probe requests.",
        group=Group.HEALTH,
    ),
    Metric(
        name="kvoffload_exporter_config_last_reload_successful",
        type=MetricType.GAUGE,
        help="1 if the last configuration reload (SIGHUP) succeeded, 0 if the new file was invalid and the "
        "old configuration is still in use (serve only).",
        group=Group.HEALTH,
    ),
    Metric(
        name="kvoffload_exporter_config_last_reload_success_timestamp_seconds",
        type=MetricType.GAUGE,
        help="Unix time of the last successful configuration load: start-up or SIGHUP reload (serve only).",
        unit=Unit.SECONDS,
        group=Group.HEALTH,
    ),
)

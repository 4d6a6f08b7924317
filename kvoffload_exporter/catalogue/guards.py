"""The exporter guarding itself: its listener's refusals, /probe evictions, unusable /version answers."""

from __future__ import annotations

from kvoffload_exporter.catalogue.metric import Metric
from kvoffload_exporter.enums import Group, MetricType

METRICS: tuple[Metric, ...] = (
    Metric(
        name="kvoffload_exporter_http_connections",
        type=MetricType.GAUGE,
        help="Client connections open to the exporter's listener now (capped by web.max_connections; serve only).",
        group=Group.HEALTH,
    ),
    Metric(
        name="kvoffload_exporter_http_rejected_total",
        type=MetricType.COUNTER,
        help="Requests or connections the exporter's listener refused by reason (closed set): over the "
        "connection cap, headers too slow, malformed or too large, wrong credentials, password checks busy "
        "(serve only).",
        labels=("reason",),
        group=Group.HEALTH,
    ),
    Metric(
        name="kvoffload_exporter_probe_evictions_total",
        type=MetricType.COUNTER,
        help="/probe targets whose kept history was dropped: idle for probe.idle_ttl, or the least recently "
        "probed one when probe.max_targets was reached (serve only).",
        labels=("reason",),
        group=Group.HEALTH,
    ),
    Metric(
        name="kvoffload_exporter_log_lines_suppressed_total",
        type=MetricType.COUNTER,
        help="Log lines about failing targets held back: one WARNING per failure kind per target every 5 "
        "minutes (/probe targets share one), the rest only counted here (serve only).",
        group=Group.HEALTH,
    ),
    Metric(
        name="kvoffload_exporter_label_churn_total",
        type=MetricType.COUNTER,
        help="History points dropped because a target's label values changed from poll to poll: a target's "
        "history holds at most twice as many (model_name, engine) keys as it has engines, plus 2, and never "
        "more than twice its engine_limit (serve only).",
        group=Group.HEALTH,
    ),
    Metric(
        name="kvoffload_exporter_version_errors_total",
        type=MetricType.COUNTER,
        help="GET /version answers that gave no usable version (the target stays up; its vllm_version label "
        "reads unknown) by reason (the scrape-error set), all targets together.",
        labels=("reason",),
        source="GET /version",
        group=Group.HEALTH,
    ),
)

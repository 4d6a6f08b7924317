"""*KV offload exporter health*: can the overview be trusted? Target polls, collectors, the canary budget."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import grafanalib.core as G

from kvoffload_exporter.bundle.alerting.promql import Matcher
from kvoffload_exporter.bundle.grafana.panels import (
    UNIT_NONE,
    Ctx,
    Layout,
    dashboard,
    stat,
    targets,
    timeseries,
    unit_of,
    value_mappings,
    variables,
)

HEALTH_UID = "kvoffload-exporter-health"


def _by(selector: str, label: str) -> str:
    """Per-second rate summed per exporter, target and a reason-like label (kept for the legend)."""
    return f"sum by (job, instance, target, {label}) (rate({selector}[$__rate_interval]))"


def _targets_row(L: Layout, c: Ctx) -> None:
    """Targets: up, the vLLM version and offload generation, time since the last poll, the exporter's build."""
    q = c.q
    L.row("Targets")
    L.add(
        stat(
            "vLLM target up",
            "1 when the exporter's last poll of the target's /metrics succeeded.",
            [(q("kvoffload_up"), "{{target}}")],
            "none",
            color_mode="background",
            mappings=value_mappings({0: ("DOWN", "red"), 1: ("UP", "green")}),
        ),
        w=6,
        h=5,
    )
    L.add(
        stat(
            "vLLM version and offload metric generation",
            "From /version and the offload families seen: flat "
            "(0.24+), transfer_type (0.16+) or none (no offload metrics).",
            [(q("kvoffload_target_info"), "{{target}}: vLLM {{vllm_version}} ({{generation}})")],
            "none",
            text_mode="name",
        ),
        w=8,
        h=5,
        steps=[("blue", None)],
    )
    L.add(
        stat(
            "Time since last successful poll",
            "Seconds since the exporter last read the target's /metrics.",
            [(f"time() - {q('kvoffload_last_success_timestamp_seconds')}", "{{target}}")],
            "s",
        ),
        w=5,
        h=5,
        steps=[("green", None), ("orange", 30.0), ("red", 120.0)],
    )
    L.add(
        stat(
            "Exporter build",
            "Exporter and Python versions of the exporters polling the selected targets.",
            [(c.per_exporter(q("kvoffload_exporter_build_info")), "{{instance}} {{version}} (Python {{python}})")],
            "none",
            text_mode="name",
        ),
        w=5,
        h=5,
        steps=[("blue", None)],
    )


def _polls_row(L: Layout, c: Ctx) -> None:
    """Polls: errors by reason, duration and body size."""
    q = c.q
    L.row("Polls")
    L.add(
        timeseries(
            "Poll errors by reason",
            "Failed polls of each target per second, by closed reason (timeout, "
            "connect, http_status, content_type, too_large, truncated, parse).",
            [
                (
                    _by(q("kvoffload_scrape_errors_total"), "reason"),
                    "{{target}} {{reason}}",
                )
            ],
            "reqps",
        ),
        w=8,
        h=8,
    )
    L.add(
        timeseries(
            "Poll duration",
            "Duration of the last poll of each target (GET /metrics and parsing).",
            [(q("kvoffload_scrape_duration_seconds"), "{{target}}")],
            "s",
        ),
        w=8,
        h=8,
    )
    L.add(
        timeseries(
            "Body size",
            "Size of the last /metrics body read from each target.",
            [(q("kvoffload_scrape_body_bytes"), "{{target}}")],
            "bytes",
        ),
        w=8,
        h=8,
    )


def _collectors_row(L: Layout, c: Ctx) -> None:
    """Collectors: success and duration of each collector's last run."""
    q = c.q
    L.row("Collectors")
    L.add(
        G.StateTimeline(
            title="Collector success",
            description="1 when the collector's last run succeeded: vllm (every "
            "target polled), host (psutil/cgroup), gpu (NVML), canary.",
            targets=targets(
                [(c.per_exporter(q("kvoffload_exporter_collector_success")), "{{instance}} {{collector}}")]
            ),
            mappings=value_mappings({0: ("failed", "red"), 1: ("ok", "green")}),
            colorMode="fixed",
            extraJson=UNIT_NONE,
        ),
        w=12,
        h=8,
    )
    L.add(
        timeseries(
            "Collector duration",
            "Duration of each collector's last run.",
            [(c.per_exporter(q("kvoffload_exporter_collector_duration_seconds")), "{{instance}} {{collector}}")],
            "s",
        ),
        w=12,
        h=8,
    )


def _canary_budget_row(L: Layout, c: Ctx) -> None:
    """The canary: its token budget left and spent, probes by result, cycles by reason."""
    q = c.q
    L.row("Canary budget")
    L.add(
        timeseries(
            "Canary token budget left",
            "Canary tokens still allowed in the current hour; at 0 the canary pauses until the next hour.",
            [(q("kvoffload_canary_budget_remaining_tokens"), "{{target}}")],
            unit_of("kvoffload_canary_budget_remaining_tokens"),
        ),
        w=6,
        h=8,
    )
    L.add(
        timeseries(
            "Canary tokens spent",
            "Prompt + generated tokens spent by canaries per second.",
            [(f"rate({q('kvoffload_canary_tokens_spent_total')}[$__rate_interval])", "{{target}}")],
            "suffix: tokens/s",
        ),
        w=6,
        h=8,
    )
    L.add(
        timeseries(
            "Canary probes by result",
            "Canary revisit probes per second by classification (offload_hit, gpu_hit, partial, miss, error).",
            [
                (
                    _by(q("kvoffload_canary_probes_total"), "result"),
                    "{{target}} {{result}}",
                )
            ],
            "reqps",
            stack=True,
        ),
        w=6,
        h=8,
    )
    L.add(
        timeseries(
            "Canary cycles by reason",
            "Canary cycles per second by result reason.",
            [
                (
                    _by(q("kvoffload_canary_cycles_total"), "reason"),
                    "{{target}} {{reason}}",
                )
            ],
            "reqps",
            stack=True,
        ),
        w=6,
        h=8,
    )


HEALTH_ROWS: tuple[Callable[[Layout, Ctx], None], ...] = (
    _targets_row,
    _polls_row,
    _collectors_row,
    _canary_budget_row,
)
"""The health dashboard's rows, top to bottom: one builder each."""


def exporter_health(selectors: Sequence[Matcher] = ()) -> dict[str, object]:
    c = Ctx.of(selectors)
    L = Layout()
    for row in HEALTH_ROWS:
        row(L, c)
    return dashboard(
        "KV offload exporter health",
        HEALTH_UID,
        "Can the KV offload overview be trusted? Target polls, collectors, and the canary's budget.",
        L,
        variables(c, engine_vars=False),
    )

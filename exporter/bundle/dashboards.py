"""The two Grafana dashboards, built with grafanalib from catalogue names and post-processed for Grafana ≥ 10.

*KV offload overview* answers "is offloading paying off?"; *KV offload exporter health* says whether the
answer can be trusted. Every panel has a description and a unit; uids are fixed so links and
provisioned copies stay stable. Only this module (and grafana_alerts) imports grafanalib.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import attr
import grafanalib.core as G
from grafanalib._gen import DashboardEncoder

from exporter.bundle.grafana_json import dumps, modernise
from exporter.bundle.promql import Matcher, Query
from exporter.catalogue import CATALOGUE, STATES, Unit
from exporter.enums import State

OVERVIEW_UID = "kvoffload-overview"
HEALTH_UID = "kvoffload-exporter-health"
TAGS = ["vllm", "kv-offload", "kvoffload-exporter"]

UNITS: dict[Unit, str] = {
    Unit.BYTES: "bytes",
    Unit.SECONDS: "s",
    Unit.RATIO: "percentunit",
    Unit.BYTES_PER_SECOND: "Bps",
    Unit.TOKENS: "suffix: tokens",
}
"""Catalogue unit → Grafana unit id (tests check every panel's unit against its metrics)."""

_UNIT_NONE = {"fieldConfig": {"defaults": {"unit": "none"}}}  # StateTimeline has no unit parameter

STATE_COLORS: dict[State, str] = {
    State.NOT_CONFIGURED: "text",
    State.IDLE: "blue",
    State.STORING: "yellow",
    State.STORE_WITHOUT_LOAD: "red",
    State.HIT: "green",
}


def _mt(label: str, op: str, value: str) -> str:
    return str(Matcher(label, op, value))


def unit_of(metric: str) -> str:
    return UNITS.get(CATALOGUE[metric].unit, "short")


@dataclass
class Layout:
    """Left-to-right grid placement (24 columns); `row()` starts a new full-width row header."""

    panels: list[Any] = field(default_factory=list)
    steps: dict[int, list[tuple[str, float | None]]] = field(default_factory=dict)
    x: int = 0
    y: int = 0
    h: int = 0

    def row(self, title: str) -> None:
        self._newline()
        self.panels.append(
            G.RowPanel(title=title, id=len(self.panels) + 1, gridPos=G.GridPos(h=1, w=24, x=0, y=self.y))
        )
        self.y += 1

    def _newline(self) -> None:
        if self.x:
            self.y += self.h
            self.x, self.h = 0, 0

    def add(self, panel: Any, w: int, h: int, steps: Sequence[tuple[str, float | None]] = ()) -> None:
        if self.x + w > 24:
            self._newline()
        pid = len(self.panels) + 1
        self.panels.append(attr.evolve(panel, id=pid, gridPos=G.GridPos(h=h, w=w, x=self.x, y=self.y)))
        if steps:
            self.steps[pid] = list(steps)
        self.x += w
        self.h = max(self.h, h)


def _targets(exprs: Sequence[tuple[str, str]], instant: bool = False) -> list[G.Target]:
    return [
        G.Target(expr=e, legendFormat=legend, refId=chr(ord("A") + i), instant=instant)
        for i, (e, legend) in enumerate(exprs)
    ]


def timeseries(
    title: str,
    description: str,
    exprs: Sequence[tuple[str, str]],
    unit: str,
    *,
    stack: bool = False,
    fill: int = 10,
    overrides: Sequence[dict[str, Any]] = (),
    thresholds_line: bool = False,
    decimals: int | None = None,
) -> G.TimeSeries:
    return G.TimeSeries(
        title=title,
        description=description,
        targets=_targets(exprs),
        unit=unit,
        fillOpacity=fill,
        legendDisplayMode="table",
        legendPlacement="bottom",
        legendCalcs=["lastNotNull", "max"],
        tooltipMode="multi",
        tooltipSort="desc",
        stacking={"mode": "normal", "group": "A"} if stack else {},
        overrides=list(overrides),
        thresholdsStyleMode="line" if thresholds_line else "off",
        valueDecimals=decimals,
        spanNulls=False,
        showPoints="never",
    )


def stat(
    title: str,
    description: str,
    exprs: Sequence[tuple[str, str]],
    unit: str,
    *,
    text_mode: str = "auto",
    mappings: Sequence[dict[str, Any]] = (),
    color_mode: str = "value",
    graph: bool = False,
) -> G.Stat:
    return G.Stat(
        title=title,
        description=description,
        targets=_targets(exprs, instant=True),
        format=unit,
        textMode=text_mode,
        mappings=list(mappings),
        colorMode=color_mode,
        reduceCalc="lastNotNull",
        graphMode="area" if graph else "none",
        noValue="no data",
        orientation="auto",
    )


def _value_mappings(values: dict[int, tuple[str, str]]) -> list[dict[str, Any]]:
    """Grafana ≥ 8 value mappings: {value: (text, color)} → one `value` mapping."""
    return [
        {
            "type": "value",
            "options": {
                str(v): {"text": text, "color": color, "index": i}
                for i, (v, (text, color)) in enumerate(sorted(values.items()))
            },
        }
    ]


@dataclass(frozen=True)
class _Ctx:
    q: Query  # with template-variable matchers
    raw: Query  # user selectors only (variable queries)

    @classmethod
    def of(cls, selectors: Sequence[Matcher]) -> _Ctx:
        return cls(Query(tuple(selectors), template_vars=True), Query(tuple(selectors)))

    def per_exporter(self, expr: str) -> str:
        """Series without a `target` label (host, GPU, collectors): keep the exporters of the chosen targets."""
        return f"{expr} and on (job, instance) {self.q('kvoffload_up')}"


def _multi(name: str, label: str, query: str) -> G.Template:
    """A multi-value variable with "All" (any value) selected by default."""
    return G.Template(
        name=name,
        label=label,
        query=query,
        dataSource="${datasource}",
        includeAll=True,
        multi=True,
        allValue=".*",
        default="$__all",
        refresh=G.REFRESH_ON_TIME_RANGE_CHANGE,
    )


def _variables(c: _Ctx, engine_vars: bool) -> G.Templating:
    ds = G.Template(name="datasource", label="Data source", query="prometheus", type="datasource")
    out = [ds, _multi("target", "Target", f"label_values({c.raw('kvoffload_up')}, target)")]
    if engine_vars:
        tokens = "kvoffload_prompt_tokens_total"
        target = _mt("target", "=~", "$target")
        out.append(_multi("model", "Model", f"label_values({c.raw(tokens, target)}, model_name)"))
        model = _mt("model_name", "=~", "$model")
        out.append(_multi("engine", "Engine", f"label_values({c.raw(tokens, target, model)}, engine)"))
    return G.Templating(list=out)


def _dashboard(title: str, uid: str, description: str, layout: Layout, templating: G.Templating) -> dict[str, Any]:
    dash = G.Dashboard(
        title=title,
        uid=uid,
        description=description,
        tags=TAGS,
        panels=layout.panels,
        templating=templating,
        timezone="browser",
        refresh="30s",
        time=G.Time("now-6h", "now"),
        graphTooltip=G.GRAPH_TOOLTIP_MODE_SHARED_CROSSHAIR,
        editable=True,
    )
    plain = json.loads(json.dumps(dash.to_json_data(), cls=DashboardEncoder))
    return modernise(plain, layout.steps)


def overview(selectors: Sequence[Matcher] = ()) -> dict[str, Any]:
    c = _Ctx.of(selectors)
    q = c.q
    eng = "{{target}} {{model_name}} e{{engine}}"
    L = Layout()

    L.row("Is offloading paying off?")
    state_expr = (
        "max without (state) ("
        + " or ".join(f"{q('kvoffload_state', _mt('state', '=', s))} * {i}" for i, s in enumerate(STATES) if i)
        + ")"
    )
    L.add(
        G.StateTimeline(
            title="Offload evidence state per engine",
            description="Exporter's verdict per engine over its window: hit = loads from the tier happened; "
            "store_without_load = stores but no loads while prefixes were reused (the failure "
            "mode of vllm-project/vllm#47890); storing = stores, no reuse visible; idle = nothing "
            "moved; not configured = no offload metrics.",
            targets=_targets([(state_expr, eng)]),
            mappings=_value_mappings({i: (s.replace("_", " "), STATE_COLORS[s]) for i, s in enumerate(STATES)}),
            colorMode="fixed",
            rowHeight=0.8,
            showValue="auto",
            mergeValues=True,
            extraJson=_UNIT_NONE,
        ),
        w=24,
        h=6,
    )
    L.add(
        timeseries(
            "Load/store ratio",
            "Offload bytes loaded back ÷ bytes stored over the exporter window. Near 0 "
            "with steady stores means the tier is written but never read; > 1 means stored blocks are reused "
            "several times.",
            [(q("kvoffload_load_store_ratio"), eng)],
            "percentunit",
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
                (f"rate({q('kvoffload_offload_load_bytes_total')}[$__rate_interval])", f"load {eng}"),
                (f"-rate({q('kvoffload_offload_store_bytes_total')}[$__rate_interval])", f"store {eng}"),
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
                (q("kvoffload_offload_load_bandwidth_bytes_per_second"), f"load {eng}"),
                (q("kvoffload_offload_store_bandwidth_bytes_per_second"), f"store {eng}"),
            ],
            "Bps",
        ),
        w=8,
        h=8,
    )

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
            "−546 ms on Qwen3-32B (7x faster). Dashed: bootstrap CI bounds.",
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

    L.row("Memory")
    L.add(
        timeseries(
            "Host RAM headroom vs configured tier",
            "Memory that can still be allocated (min of host available "
            "and cgroup limit − usage) next to the pinned offload tier configured on that host. Headroom far "
            "below the tier means a restart that re-pins it, or any spike, risks an OOM kill.",
            [
                (c.per_exporter(q("kvoffload_host_memory_headroom_bytes")), "headroom {{instance}}"),
                (c.per_exporter(q("kvoffload_host_memory_available_bytes")), "available {{instance}}"),
                (f"sum by (job, instance) ({q('kvoffload_offload_tier_bytes')})", "configured tier {{instance}}"),
            ],
            "bytes",
        ),
        w=12,
        h=8,
    )
    vram = f"{q('kvoffload_gpu_memory_used_bytes')} / {q('kvoffload_gpu_memory_total_bytes')}"
    L.add(
        G.GaugePanel(
            title="VRAM used per GPU",
            description="Framebuffer used ÷ total per GPU (NVML) on the exporters of the selected targets.",
            targets=_targets([(c.per_exporter(vram), "GPU {{gpu}} {{name}}")], instant=True),
            format="percentunit",
            min=0,
            max=1,
            calc="lastNotNull",
            thresholdMarkers=True,
        ),
        w=6,
        h=8,
        steps=[("green", None), ("orange", 0.9), ("red", 0.97)],
    )
    L.add(
        timeseries(
            "VRAM per GPU",
            "Framebuffer used and total per GPU (NVML).",
            [
                (c.per_exporter(q("kvoffload_gpu_memory_used_bytes")), "used GPU {{gpu}}"),
                (c.per_exporter(q("kvoffload_gpu_memory_total_bytes")), "total GPU {{gpu}}"),
            ],
            "bytes",
            fill=0,
        ),
        w=6,
        h=8,
    )

    L.row("Offload tier pressure")
    L.add(
        timeseries(
            "Allocation failures and skipped stores",
            "Store allocations that failed because the tier was full "
            "of in-flight chunks, and stores skipped by reuse gating (store_threshold ≥ 2), per second.",
            [
                (f"rate({q('kvoffload_offload_allocation_failures_total')}[$__rate_interval])", f"failed {eng}"),
                (f"rate({q('kvoffload_offload_stores_skipped_total')}[$__rate_interval])", f"skipped {eng}"),
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
            [(q("kvoffload_offload_inflight_ratio"), eng)],
            "percentunit",
        ),
        w=12,
        h=8,
    )

    return _dashboard(
        "KV offload overview",
        OVERVIEW_UID,
        "Is vLLM KV-cache offloading paying off? Evidence state, load/store ratio, bandwidth, hit ratios, "
        "TTFT, canary ΔTTFT and memory headroom, from kvoffload-exporter.",
        L,
        _variables(c, engine_vars=True),
    )


def exporter_health(selectors: Sequence[Matcher] = ()) -> dict[str, Any]:
    c = _Ctx.of(selectors)
    q = c.q
    L = Layout()
    L.row("Targets")
    L.add(
        stat(
            "vLLM target up",
            "1 when the exporter's last poll of the target's /metrics succeeded.",
            [(q("kvoffload_up"), "{{target}}")],
            "none",
            color_mode="background",
            mappings=_value_mappings({0: ("DOWN", "red"), 1: ("UP", "green")}),
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

    L.row("Polls")
    L.add(
        timeseries(
            "Poll errors by reason",
            "Failed polls of each target per second, by closed reason (timeout, "
            "connect, http_status, content_type, too_large, truncated, parse).",
            [
                (
                    f"sum by (target, reason) (rate({q('kvoffload_scrape_errors_total')}[$__rate_interval]))",
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

    L.row("Collectors")
    L.add(
        G.StateTimeline(
            title="Collector success",
            description="1 when the collector's last run succeeded: vllm (every "
            "target polled), host (psutil/cgroup), gpu (NVML), canary.",
            targets=_targets([(c.per_exporter(q("kvoffload_collector_success")), "{{instance}} {{collector}}")]),
            mappings=_value_mappings({0: ("failed", "red"), 1: ("ok", "green")}),
            colorMode="fixed",
            extraJson=_UNIT_NONE,
        ),
        w=12,
        h=8,
    )
    L.add(
        timeseries(
            "Collector duration",
            "Duration of each collector's last run.",
            [(c.per_exporter(q("kvoffload_collector_duration_seconds")), "{{instance}} {{collector}}")],
            "s",
        ),
        w=12,
        h=8,
    )

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
                    f"sum by (target, result) (rate({q('kvoffload_canary_probes_total')}[$__rate_interval]))",
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
                    f"sum by (target, reason) (rate({q('kvoffload_canary_cycles_total')}[$__rate_interval]))",
                    "{{target}} {{reason}}",
                )
            ],
            "reqps",
            stack=True,
        ),
        w=6,
        h=8,
    )

    return _dashboard(
        "KV offload exporter health",
        HEALTH_UID,
        "Can the KV offload overview be trusted? Target polls, collectors, and the canary's budget.",
        L,
        _variables(c, engine_vars=False),
    )


DASHBOARDS = {"kvoffload-overview.json": overview, "kvoffload-exporter-health.json": exporter_health}


def render(selectors: Sequence[Matcher] = ()) -> dict[str, str]:
    return {f"dashboards/{name}": dumps(fn(selectors)) for name, fn in DASHBOARDS.items()}

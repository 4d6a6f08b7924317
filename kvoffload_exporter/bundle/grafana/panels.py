"""Panel and dashboard building blocks shared by the two dashboards (grafanalib in, Grafana ≥ 10 JSON out).

Besides layout and grafanalib wrappers this is where every panel gets what an operator needs without
reading the PromQL: a legend naming the exporter instance (replicas of one model are told apart), the
metric names in its description, `noValue` saying why a panel can be empty (canary panels: `serve
--canary.enabled`), and `min: 0` on ratio panels. Template variables filter by the scrape labels Prometheus (and
the Prometheus Operator) attach (job, namespace, pod, instance) and there is an ad-hoc filter.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import attr
import grafanalib.core as G

from kvoffload_exporter.bundle.alerting.promql import SCRAPE_LABELS, Matcher, Query, names_in
from kvoffload_exporter.bundle.grafana.grafana_json import DATASOURCE, modernise
from kvoffload_exporter.catalogue import CATALOGUE, Unit
from kvoffload_exporter.enums import Group

TAGS = ["vllm", "kv-offload", "kvoffload-exporter"]

UNITS: dict[Unit, str] = {
    Unit.BYTES: "bytes",
    Unit.SECONDS: "s",
    Unit.RATIO: "percentunit",
    Unit.BYTES_PER_SECOND: "Bps",
    Unit.TOKENS: "suffix: tokens",
}
"""Catalogue unit → Grafana unit id (tests check every panel's unit against its metrics)."""

UNBOUNDED_RATIOS: dict[str, str] = {
    "kvoffload_load_store_ratio": "loads ÷ stores is above 1 when stored blocks are loaded back several times",
}
"""Ratios that are not shares of a whole: shown as plain numbers (`RATIO_UNIT`), never as percent."""
RATIO_UNIT = "none"  # 8.1 reads 8.1, not 810 %

NO_VALUE = "No data"
NO_VALUE_CANARY = "No data: needs serve --canary.enabled"
CANARY_NOTE = " Needs `serve --canary.enabled` (or `canary.enabled: true`); empty without it."
PER_EXPORTER = " and on (job, instance) "
"""Joins a per-exporter series (host, GPU, collectors) to the exporters of the chosen targets."""

UNIT_NONE = {"fieldConfig": {"defaults": {"unit": "none"}}}  # StateTimeline has no unit parameter

ADHOC = {
    "type": "adhoc",
    "name": "filters",
    "label": "Filters",
    "datasource": dict(DATASOURCE),
    "filters": [],
}
"""Grafana adds these label filters to every query of the datasource (any label, e.g. a cluster's)."""


class _Encoder(json.JSONEncoder):
    """grafanalib objects through their public `to_json_data()` (grafanalib's own encoder lives in its private
    `_gen` module)."""

    def default(self, o: object) -> object:
        to_json = getattr(o, "to_json_data", None)
        return to_json() if callable(to_json) else super().default(o)


def plain_json(obj: object) -> Any:
    """A grafanalib object (or a structure holding them) as plain JSON data."""
    data = obj.to_json_data() if hasattr(obj, "to_json_data") else obj
    return json.loads(json.dumps(data, cls=_Encoder))


def mt(label: str, op: str, value: str) -> str:
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


def _legend(legend: str) -> str:
    """Every legend names the exporter instance: replicas of one model otherwise look identical."""
    return legend if "{{instance}}" in legend else f"{legend} {{{{instance}}}}"


def targets(exprs: Sequence[tuple[str, str]], instant: bool = False) -> list[G.Target]:
    return [
        G.Target(expr=e, legendFormat=_legend(legend), refId=chr(ord("A") + i), instant=instant)
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
    overrides: Sequence[dict[str, object]] = (),
    thresholds_line: bool = False,
    decimals: int | None = None,
) -> G.TimeSeries:
    return G.TimeSeries(
        title=title,
        description=description,
        targets=targets(exprs),
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
    mappings: Sequence[dict[str, object]] = (),
    color_mode: str = "value",
    graph: bool = False,
) -> G.Stat:
    return G.Stat(
        title=title,
        description=description,
        targets=targets(exprs, instant=True),
        format=unit,
        textMode=text_mode,
        mappings=list(mappings),
        colorMode=color_mode,
        reduceCalc="lastNotNull",
        graphMode="area" if graph else "none",
        noValue="no data",
        orientation="auto",
    )


def state_timeline(
    title: str, description: str, tgts: list[G.Target], mappings: dict[int, tuple[str, str]]
) -> G.StateTimeline:
    """One engine-state row per series (the evidence state, the state reason): merged runs, fixed colours."""
    return G.StateTimeline(
        title=title,
        description=description,
        targets=tgts,
        mappings=value_mappings(mappings),
        colorMode="fixed",
        rowHeight=0.8,
        showValue="auto",
        mergeValues=True,
        extraJson=UNIT_NONE,
    )


def value_mappings(values: dict[int, tuple[str, str]]) -> list[dict[str, object]]:
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
class Ctx:
    q: Query  # with template-variable matchers
    raw: Query  # user selectors only (variable queries)

    @classmethod
    def of(cls, selectors: Sequence[Matcher]) -> Ctx:
        return cls(Query(tuple(selectors), template_vars=True), Query(tuple(selectors)))

    def per_exporter(self, expr: str) -> str:
        """Series without a `target` label (host, GPU, collectors): keep the exporters of the chosen targets."""
        return f"{expr}{PER_EXPORTER}{self.q('kvoffload_up')}"


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


def variables(c: Ctx, engine_vars: bool) -> G.Templating:
    """Scrape labels first (job → namespace → pod → instance), then target (→ model → engine), each
    variable's values limited by the ones before it."""
    ds = G.Template(name="datasource", label="Data source", query="prometheus", type="datasource")
    out = [ds]
    chain: list[str] = []
    for name in (*SCRAPE_LABELS, "target"):
        out.append(_multi(name, name.capitalize(), f"label_values({c.raw('kvoffload_up', *chain)}, {name})"))
        chain.append(mt(name, "=~", f"${name}"))
    if engine_vars:
        tokens = "kvoffload_prompt_tokens_total"
        out.append(_multi("model", "Model", f"label_values({c.raw(tokens, *chain)}, model_name)"))
        model = mt("model_name", "=~", "$model")
        out.append(_multi("engine", "Engine", f"label_values({c.raw(tokens, *chain, model)}, engine)"))
    return G.Templating(list=out)


def dashboard(title: str, uid: str, description: str, layout: Layout, templating: G.Templating) -> dict[str, object]:
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
    plain = plain_json(dash)
    out = modernise(plain, layout.steps)
    for p in out["panels"]:
        if p["type"] != "row":
            finish(p)
    out["templating"]["list"].append(dict(ADHOC))
    return out


def plotted(expr: str) -> set[str]:
    """Catalogue names a query plots (the per-exporter join's kvoffload_up is a filter, not plotted)."""
    return names_in(expr.split(PER_EXPORTER)[0])


def finish(p: dict[str, Any]) -> None:  # Any: grafanalib's panel JSON, read and written nested
    """Description naming the metrics (and `serve --canary.enabled` where needed), `noValue`, `min: 0` on ratios."""
    names = sorted(set().union(*(plotted(t["expr"]) for t in p["targets"])))
    canary = any(CATALOGUE[n].group is Group.CANARY for n in names)
    label = "Metric" if len(names) == 1 else "Metrics"
    p["description"] = (
        p["description"].rstrip()
        + f" {label}: "
        + ", ".join(f"`{n}`" for n in names)
        + "."
        + (CANARY_NOTE if canary else "")
    )
    d = p["fieldConfig"]["defaults"]
    d["noValue"] = NO_VALUE_CANARY if canary else NO_VALUE
    if names and all(CATALOGUE[n].unit is Unit.RATIO for n in names):
        d["min"] = 0
        if d["unit"] == "percentunit":
            d["max"] = 1

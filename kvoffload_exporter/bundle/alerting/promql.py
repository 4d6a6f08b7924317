"""PromQL selector building: every series name comes from the catalogue, user selectors go into every one.

`Query(selectors)` renders `name{matchers}`; a name the catalogue does not own raises KeyError, so a
typo can never ship as a silent "No data". Dashboards add template-variable matchers only for labels
the catalogue says the metric carries.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from kvoffload_exporter.bundle.settings import check_regex
from kvoffload_exporter.catalogue import CATALOGUE

_MATCHER = re.compile(r"^\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*(=~|!~|!=|=)\s*(.*?)\s*$")


@dataclass(frozen=True)
class Matcher:
    label: str
    op: str
    value: str

    def __str__(self) -> str:
        v = self.value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
        return f'{self.label}{self.op}"{v}"'


_QUOTED = re.compile(r'^(["\'])((?:(?!\1)[^\\]|\\.)*)\1$')
_ANOTHER = re.compile(r"[,\s]\s*[a-zA-Z_][a-zA-Z0-9_]*\s*(=~|!~|!=|=)")


def matcher(label: str, op: str, value: str) -> str:
    """One label matcher as PromQL writes it: `state="hit"`."""
    return str(Matcher(label, op, value))


def num(v: float) -> str:
    return f"{v:.15g}"  # 1e9 → 1000000000: PromQL accepts both, people read this one


def pct(v: float | str) -> str:
    """A ratio as a percentage: 0.9 → 90."""
    return f"{float(v) * 100:g}"


def parse_selector(raw: str) -> Matcher:
    """`job=vllm-sidecar`, `namespace=~"llm-.*"`, `env!=dev` → Matcher (surrounding quotes optional).

    One matcher per call: `job=x,env=y` is refused (it would silently become job="x,env=y"), an empty
    value only when written `job=""`, and a regex must compile."""
    m = _MATCHER.match(raw)
    if not m:
        raise ValueError(f"selector must be LABEL=VALUE (or !=, =~, !~), got {raw!r}")
    label, op, value = m.groups()
    if label.startswith("__"):
        raise ValueError(f"selector label {label!r} is reserved")
    quoted = _QUOTED.match(value)
    if quoted:
        value = re.sub(r'\\(["\'\\])', r"\1", quoted.group(2))
    elif value[:1] in ("'", '"'):
        raise ValueError(f"selector {raw!r}: one matcher per --selector, value in one pair of quotes")
    elif _ANOTHER.search(value):
        raise ValueError(f"selector {raw!r} holds more than one matcher: give each its own --selector")
    elif not value:
        raise ValueError(f'selector {raw!r} has an empty value: write {label}{op}"" if that is what you mean')
    if op in ("=~", "!~"):
        check_regex(f"selector {raw!r}", value)
    return Matcher(label, op, value)


def parse_selectors(raw: Iterable[str] | Mapping[str, str] | None) -> tuple[Matcher, ...]:
    if not raw:
        return ()
    if isinstance(raw, Mapping):
        out = tuple(Matcher(parse_selector(f'{k}=""').label, "=", v) for k, v in raw.items())
    else:
        out = tuple(parse_selector(r) for r in raw)
    labels = [m.label for m in out]
    dup = sorted({lb for lb in labels if labels.count(lb) > 1})
    if dup:
        raise ValueError(f"selector label(s) given twice: {', '.join(dup)}")
    return out


# Dashboard template variables and the catalogue label each one filters.
TEMPLATE_LABELS = {"target": "target", "model_name": "model", "engine": "engine"}
SCRAPE_LABELS = ("job", "namespace", "pod", "instance")
"""Labels Prometheus adds to every series (job, instance) and the Prometheus Operator's ServiceMonitor and
PodMonitor add (namespace, pod): each replica's series differ in them, so every dashboard query filters
by a variable of each (a missing label is "" and matches the "All" value `.*`)."""


@dataclass(frozen=True)
class Query:
    """Renders selectors for catalogue metrics with the user's matchers (and optionally dashboard vars)."""

    selectors: tuple[Matcher, ...] = ()
    template_vars: bool = False
    recorded: Mapping[str, str] = field(default_factory=dict)

    def __call__(self, name: str, *extra: str) -> str:
        metric = CATALOGUE[name]  # KeyError: a name the catalogue does not own
        parts = [str(m) for m in self.selectors]
        if self.template_vars:
            parts.extend(f'{label}=~"${label}"' for label in SCRAPE_LABELS)
            for label, var in TEMPLATE_LABELS.items():
                if label in metric.labels:
                    parts.append(f'{label}=~"${var}"')
        parts.extend(extra)
        return f"{name}{{{','.join(parts)}}}" if parts else name

    def record(self, name: str, *extra: str) -> str:
        """A recording-rule series (colon name); the user selectors were applied to its inputs already."""
        if name not in self.recorded:
            raise KeyError(f"unknown recording rule {name!r}")
        return f"{name}{{{','.join(extra)}}}" if extra else name

    def with_vars(self) -> Query:
        return Query(self.selectors, True, self.recorded)


def counted_in(series: str, window: str) -> str:
    """A counter that counted an event in the last `window`: it rose, or its series was first seen above zero.

    `increase()` needs two samples of a series, so a counter whose first sample is already above zero never
    rises: a canary that confirms a mismatch (and ends its run) before Prometheus's first scrape, or events
    counted while nothing scraped the exporter for longer than the window. A series with no sample in the
    window before this one and above zero now counts too (its value: what it counted)."""
    return (
        f"increase({series}[{window}]) > 0\n"
        f"or\n({series} > 0 unless present_over_time({series}[{window}] offset {window}))"
    )


def counted_over(series: str, window: str) -> str:
    """`counted_in`, and 0 for the series that counted nothing (a panel shows them green, not empty)."""
    return f"({counted_in(series, window)})\nor\nincrease({series}[{window}])"


def names_in(expr: str) -> set[str]:
    """Every `kvoffload` series name referenced in a PromQL expression (catalogue or recorded)."""
    unquoted = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)  # label values are not names
    return {t for t in re.findall(r"(?<![\w:$])[a-zA-Z_:][\w:]*", unquoted) if "kvoffload" in t}


def template_free(expr: str, values: Mapping[str, str] | None = None) -> str:
    """Substitute Grafana variables so a dashboard query can run against the Prometheus HTTP API."""
    values = {
        **{label: ".*" for label in SCRAPE_LABELS},
        "target": ".*",
        "model": ".*",
        "engine": ".*",
        "__rate_interval": "1m",
        "__interval": "15s",
        "__range": "5m",
        **(values or {}),
    }
    out = expr
    for k in sorted(values, key=len, reverse=True):
        out = out.replace("${" + k + "}", values[k]).replace("$" + k, values[k])
    return out


def join_labels(labels: Sequence[str]) -> str:
    return ", ".join(labels)

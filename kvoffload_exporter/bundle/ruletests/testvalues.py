"""What the generated promtool tests need to know without a Prometheus: durations in milliseconds, label
values that satisfy the user's selectors, and alert annotations rendered the way Prometheus renders them.

The annotation renderer understands exactly the template forms the rules use (`{{ $labels.x }}`,
`{{ $value | humanize }}`, `humanize1024`, `humanizeDuration`, `{{ if $labels.x }}…{{ else }}…{{ end }}`,
`{{ with $labels.x }}…{{ . }}…{{ end }}`); anything else raises, so a new form cannot ship untested.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence

from kvoffload_exporter.bundle.alerting.promql import Matcher
from kvoffload_exporter.saferegex import shortest_example

_UNIT_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000, "w": 604_800_000, "y": 31_536_000_000}
_PART = re.compile(r"(\d+)(ms|s|m|h|d|w|y)")


def duration_ms(text: str) -> int:
    """A Prometheus duration (`1h30m`, `500ms`) in milliseconds."""
    parts = _PART.findall(text)
    if not parts or "".join(n + u for n, u in parts) != text:
        raise ValueError(f"not a Prometheus duration: {text!r}")
    return sum(int(n) * _UNIT_MS[u] for n, u in parts)


def fmt_duration(ms: int) -> str:
    """Milliseconds as a promtool duration (largest exact unit)."""
    for unit in ("d", "h", "m", "s"):
        if ms % _UNIT_MS[unit] == 0 and ms:
            return f"{ms // _UNIT_MS[unit]}{unit}"
    return f"{ms}ms"


# ------------------------------------------------------------------------------------------ labels
def matches(m: Matcher, value: str) -> bool:
    if m.op == "=":
        return value == m.value
    if m.op == "!=":
        return value != m.value
    hit = re.fullmatch(m.value, value) is not None
    return hit if m.op == "=~" else not hit


def _examples(pattern: str) -> list[str]:
    """Strings that may match a regex: its literal alternatives, then one built from its parse tree."""
    out = [alt for alt in pattern.split("|") if re.fullmatch(r"[\w\-.:/ ]*", alt)]
    example = shortest_example(pattern)  # None for a pattern Python's parser refuses: the fixed candidates
    return out if example is None else [*out, example]


def label_value(label: str, default: str, selectors: Sequence[Matcher]) -> str | None:
    """A value for `label` that every selector on it accepts ("" = label absent), preferring `default`;
    None when none of the candidates does."""
    mine = [m for m in selectors if m.label == label]
    candidates = [default]
    for m in mine:
        candidates += [m.value] if m.op == "=" else _examples(m.value) if m.op == "=~" else []
    candidates += [f"{default}-x", "x", "kvoffload", "0", ""]
    return next((v for v in candidates if all(matches(m, v) for m in mine)), None)


# ---------------------------------------------------------------------------------- annotations
def _g4(v: float) -> str:
    return f"{v:.4g}"


def humanize(v: float) -> str:
    if v == 0 or math.isnan(v) or math.isinf(v):
        return _g4(v)
    if abs(v) >= 1:
        prefix = ""
        for p in ("k", "M", "G", "T", "P", "E", "Z", "Y"):
            if abs(v) < 1000:
                break
            prefix, v = p, v / 1000
        return _g4(v) + prefix
    prefix = ""
    for p in ("m", "u", "n", "p", "f", "a", "z", "y"):
        if abs(v) >= 1:
            break
        prefix, v = p, v * 1000
    return _g4(v) + prefix


def humanize1024(v: float) -> str:
    if abs(v) <= 1 or math.isnan(v) or math.isinf(v):
        return _g4(v)
    prefix = ""
    for p in ("ki", "Mi", "Gi", "Ti", "Pi", "Ei", "Zi", "Yi"):
        if abs(v) < 1024:
            break
        prefix, v = p, v / 1024
    return _g4(v) + prefix


def humanize_duration(v: float) -> str:
    if math.isnan(v) or math.isinf(v):
        return _g4(v)
    if v == 0:
        return "0s"
    if abs(v) >= 1:
        sign = "-" if v < 0 else ""
        v = abs(v)
        whole = int(v)
        sec, mins, hours, days = whole % 60, whole // 60 % 60, whole // 3600 % 24, whole // 86400
        if days:
            return f"{sign}{days}d {hours}h {mins}m {sec}s"
        if hours:
            return f"{sign}{hours}h {mins}m {sec}s"
        if mins:
            return f"{sign}{mins}m {sec}s"
        return f"{sign}{_g4(v)}s"
    prefix = ""
    for p in ("m", "u", "n", "p", "f", "a", "z", "y"):
        if abs(v) >= 1:
            break
        prefix, v = p, v * 1000
    return f"{_g4(v)}{prefix}s"


_FUNCS = {"humanize": humanize, "humanize1024": humanize1024, "humanizeDuration": humanize_duration}
_IF = re.compile(r"\{\{ if \$labels\.(\w+) \}\}(.*?)\{\{ else \}\}(.*?)\{\{ end \}\}", re.S)
_WITH = re.compile(r"\{\{ with \$labels\.(\w+) \}\}(.*?)\{\{ end \}\}", re.S)
_LABEL = re.compile(r"\{\{ \$labels\.(\w+) \}\}")
_VALUE = re.compile(r"\{\{ \$value \| (humanize|humanize1024|humanizeDuration) \}\}")


def render(template: str, labels: Mapping[str, str], value: float) -> str:
    """A rule annotation as Prometheus renders it for an alert with these labels and value."""
    out = _IF.sub(lambda m: m.group(2) if labels.get(m.group(1)) else m.group(3), template)
    out = _WITH.sub(lambda m: m.group(2).replace("{{ . }}", labels[m.group(1)]) if labels.get(m.group(1)) else "", out)
    out = _LABEL.sub(lambda m: labels.get(m.group(1), ""), out)
    out = _VALUE.sub(lambda m: _FUNCS[m.group(1)](value), out)
    if "{{" in out:
        raise ValueError(f"annotation template form not understood: {out!r}")
    return out

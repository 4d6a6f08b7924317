"""Text exposition writer driven by the catalogue: HELP/TYPE come from there, never from call sites."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping

from exporter.catalogue import CATALOGUE, Metric

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

_HEADS: dict[tuple[str, ...], str] = {}  # (name, label values...) -> `name{k="v",...}`; keys fixed per name


def _escape(v: str) -> str:
    if "\\" in v or '"' in v or "\n" in v:
        v = v.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return v


def format_value(v: float) -> str:
    if math.isnan(v):
        return "NaN"
    if math.isinf(v):
        return "+Inf" if v > 0 else "-Inf"
    if v == int(v) and abs(v) < 1e15:
        return f"{int(v)}.0"
    return repr(float(v))


class Exposition:
    """Collects samples per catalogue metric and writes them in catalogue order."""

    def __init__(self) -> None:
        self._lines: dict[str, list[str]] = {}

    def add(self, name: str, value: float | None, labels: Mapping[str, str] | None = None) -> None:
        """Add one sample; a None value is skipped (undefined, not zero). Labels must match the catalogue."""
        if value is None:
            return
        m = CATALOGUE[name]
        labels = labels or {}
        if tuple(labels) != m.labels:
            raise ValueError(f"{name}: labels {tuple(labels)} != catalogue {m.labels}")
        self._lines.setdefault(name, []).append(self._line(name, labels, value))

    def add_states(self, name: str, labels: Mapping[str, str], states: Iterable[str], current: str | None) -> None:
        """A state set: one series per state, 1 for the current one (none when `current` is None)."""
        m = CATALOGUE[name]
        state_label = m.labels[-1]
        for s in states:
            self.add(name, 1.0 if s == current else 0.0, {**labels, state_label: s})

    @staticmethod
    def _line(name: str, labels: Mapping[str, str], value: float) -> str:
        key = (name, *labels.values())
        head = _HEADS.get(key)
        if head is None:
            # The same series are written after every poll: format each series name once.
            if len(_HEADS) > 50_000:
                _HEADS.clear()
            body = ",".join(f'{k}="{_escape(str(v))}"' for k, v in labels.items())
            head = _HEADS[key] = f"{name}{{{body}}}" if labels else name
        return f"{head} {format_value(value)}"

    def text(self) -> str:
        out: list[str] = []
        for name, m in CATALOGUE.items():
            lines = self._lines.get(name)
            if not lines:
                continue
            out.append(_header(m))
            out.extend(lines)
        out.append("")
        return "\n".join(out)


def _header(m: Metric) -> str:
    help_text = m.help.replace("\\", "\\\\").replace("\n", "\\n")
    return f"# HELP {m.name} {help_text}\n# TYPE {m.name} {m.prom_type}"

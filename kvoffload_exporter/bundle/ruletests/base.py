"""What every rendered promtool case is made of: the case record, the environment (settings, selectors, time
grid) and the series-value and step helpers."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from kvoffload_exporter.bundle.alerting.promql import Matcher
from kvoffload_exporter.bundle.ruletests import testvalues as tv
from kvoffload_exporter.bundle.settings import Settings

DIR = "alerts/tests"
BASE = {"job": "kvoffload", "instance": "sidecar:9466", "target": "vllm-a", "model_name": "m", "engine": "0"}
J3 = ("job", "instance", "target")
B5 = (*J3, "model_name", "engine")
OWN = {"state", "window", "quantile", "unit", "tier", "connector", "reason", "control", "verdict", "load_band"}
OWN |= {"bound", "generation", "vllm_version", "result", "pair"}
GIB = 1073741824
FS, DROPPED = "1:fs", "kvoffload_backend_dropped_%s_total"


@dataclass
class Case:
    name: str
    series: list[tuple[str, dict[str, str], str]] = field(default_factory=list)
    expected: list[tuple[dict[str, str], float]] = field(default_factory=list)
    fits: bool = True


class _Env:
    """Settings, selectors and the time grid shared by every case."""

    def __init__(self, s: Settings, selectors: Sequence[Matcher]):
        self.s, self.sel = s, tuple(selectors)
        self.step = 1000
        extra = {m.label for m in self.sel} - set(BASE) - OWN
        self.extra = {lb: tv.label_value(lb, "", self.sel) for lb in sorted(extra)}

    def at(self, *durations: str, plus: int = 2) -> int:
        """An evaluation time (ms, on the grid) after the sum of `durations`, plus `plus` steps."""
        ms = sum(tv.duration_ms(d) for d in durations)
        return -(-ms // self.step) * self.step + plus * self.step

    def n(self, t_ms: int) -> int:
        return t_ms // self.step

    def labels(self, case: Case, keys: Sequence[str], **own: str) -> dict[str, str]:
        """Labels of a series carrying the base `keys` (selector-satisfying values) and its own labels."""
        out: dict[str, str] = {}
        for k in keys:
            v = tv.label_value(k, own.pop(k, BASE.get(k, k)), self.sel)
            if v is None:
                case.fits = False
            elif v:
                out[k] = v
        for k, v in {**self.extra, **own}.items():
            if v is None:
                case.fits = False
            elif v:
                out[k] = v
        if not all(tv.matches(m, out.get(m.label, "")) for m in self.sel):
            case.fits = False
        return out


def _counter(rate: float, n: int) -> str:
    return f"0+{_v(rate)}x{n}"


def _gauge(v: float, n: int) -> str:
    return f"{_v(v)}x{n}"


def _v(v: float) -> str:
    return str(int(v)) if float(v).is_integer() and abs(v) < 2**53 else repr(float(v))


Builder = Callable[[_Env, bool], tuple[Case, int]]


RECORDED_STEP_MAX = 240_000
"""Alerts reading recorded series need a step within the 5m lookback: rule groups see each other's samples
of the previous evaluation."""


def _dividing(window: str, most: int = 10**15) -> int:
    """A step that divides the window into >= 4 (exact `increase()` values: no extrapolation), <= `most`."""
    ms = tv.duration_ms(window)
    return ms // next((k for k in range(4, ms + 1) if ms % k == 0 and ms // k <= most), 1) if ms >= 4 else 1


def _quarter(for_: str) -> int:
    """A step for a gauge alert: the `for` passes in about four steps."""
    return max(1000, tv.duration_ms(for_) // 4)


def _absent_step(s: Settings) -> int:
    """Steps short enough that the alert fires while the old series is still within `absent_memory`
    (when no step can, the one that keeps the silent case short)."""
    for_, memory = tv.duration_ms(s.absent_for), tv.duration_ms(s.absent_memory)
    quarter = _quarter(s.absent_for)
    steps = (quarter, max(1, memory // 8), max(1, (memory - for_) // 4))
    return next((x for x in steps if 2 * x + -(-for_ // x) * x <= memory), quarter)

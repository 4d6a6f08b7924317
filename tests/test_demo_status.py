"""`demo`'s live lines show how many requests the TTFT quantile comes from (a p50 of 2 requests is noise)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from exporter.commands.demo import status_lines
from exporter.derive import EngineDerived
from exporter.enums import State


def _line(d: EngineDerived) -> str:
    view = SimpleNamespace(up=True, label="sim", derived={("m", "0"): d}, last_error=None)
    exporter = SimpleNamespace(targets=[SimpleNamespace(view=view)])
    sim: Any = SimpleNamespace(state=lambda: {"engines": [{"engine": "0", "cpu_chunks_used": 3, "cpu_chunks": 9}]})
    (line,) = status_lines(exporter, sim, 12.0)
    return line


def test_demo_status_line_shows_n_with_the_ttft_quantile() -> None:
    d = EngineDerived(("m", "0"), True, 60.0, {}, {}, State.HIT, ttft_quantiles={0.5: 0.041}, ttft_count=37.0)
    assert "TTFT p50 41 ms (n=37)" in _line(d)


def test_demo_status_line_without_ttft_samples() -> None:
    d = EngineDerived(("m", "0"), True, 60.0, {}, {}, State.IDLE)
    line = _line(d)
    assert "TTFT p50 n/a" in line and "n=" not in line

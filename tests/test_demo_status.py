"""`demo`'s live lines show how many requests the TTFT quantile comes from (a p50 of 2 requests is noise)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from kvoffload_exporter.commands.demo import status_lines
from kvoffload_exporter.derive.window import EngineDerived
from kvoffload_exporter.enums import State


def _line(d: EngineDerived, reason: str | None = None) -> str:
    engines = {("m", "0"): SimpleNamespace(reason=reason)}
    view = SimpleNamespace(up=True, label="sim", derived={("m", "0"): d}, last_error=None, engines=engines)
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


def test_demo_status_line_says_what_each_hit_share_is_of() -> None:
    """The GPU share is of prompt tokens, the tier's of the tokens the GPU missed: they may add up past 100 %."""
    d = EngineDerived(("m", "0"), True, 60.0, {}, {}, State.HIT, gpu_hit_ratio=0.53, external_hit_ratio=0.67)
    line = _line(d)
    assert "GPU cache hit   53% of prompt tokens" in line
    assert "CPU tier hit   67% of the GPU misses" in line


def test_traffic_summary_adds_up() -> None:
    from kvoffload_exporter.sim.sender import TrafficReport

    text = TrafficReport(sent=38, ok=36, errors=1, dropped=2).summary()
    assert text.startswith("38 sent = 36 ok + 1 failed + 1 in flight when stopped; 2 not sent (too many in flight)")


def test_demo_status_line_names_the_state_reason() -> None:
    d = EngineDerived(("m", "0"), True, 60.0, {}, {}, State.STORE_WITHOUT_LOAD)
    assert "state store_without_load (tier_smaller_than_prefix)" in _line(d, "tier_smaller_than_prefix")
    assert "state store_without_load " in _line(d) and "(" not in _line(d).split("state ")[1].split("GPU")[0]

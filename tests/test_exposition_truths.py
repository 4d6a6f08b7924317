"""What a scraper may rely on in the exposition: summaries' _count/_sum only grow (vLLM's own cumulative
histogram, never a window count), no sample is NaN or ±Inf, whatever a target sends."""

from __future__ import annotations

import math
from pathlib import Path

from kvoffload_exporter.derive.window import advance, derive
from kvoffload_exporter.expose.collector import TargetView, collect
from kvoffload_exporter.ingest.normalise import normalise
from tests.support.prom import samples

H200 = Path(__file__).parent / "fixtures" / "vllm-0.26.0-h200-native"
CHAIN = ["0.6b_A_00_initial.prom", "0.6b_A_01_after_store.prom", "0.6b_A_02_after_displace.prom"]


def _renders(window: float) -> list[str]:
    """The exposition after each poll of the real 0.6B chain, 60 s apart, with `window` seconds of history."""
    history, out = [], []
    for i, name in enumerate(CHAIN):
        snap = normalise((H200 / name).read_text())
        history.append(advance(history[-1] if history else None, snap, 60.0 * i))
        derived = derive(history, 60.0 * i, window)
        out.append(collect([TargetView("a", "http://x", up=True, snapshot=snap, derived=derived)], "1m"))
    return out


def _value(text: str, name: str) -> float | None:
    found = [s.value for s in samples(text) if s.name == name]
    return found[0] if found else None


def test_ttft_summary_count_and_sum_are_vllms_cumulative_ones_not_the_window_count() -> None:
    """A 60 s window over polls 60 s apart holds one poll's requests: a window count would go down."""
    renders = _renders(window=60.0)
    counts = [_value(t, "kvoffload_ttft_seconds_count") for t in renders[1:]]
    sums = [_value(t, "kvoffload_ttft_seconds_sum") for t in renders[1:]]
    raw = [normalise((H200 / n).read_text()).engines[0].ttft for n in CHAIN[1:]]
    assert counts == [h.count for h in raw if h] and sums == [h.sum for h in raw if h]
    assert all(c is not None for c in counts) and counts == sorted(counts)  # type: ignore[type-var]


def test_no_sample_is_nan_or_infinite_even_when_the_target_sends_nan_gauges() -> None:
    text = (H200 / CHAIN[-1]).read_text()
    nan = text.replace(
        'vllm:kv_offload_cpu_cache_usage_perc{engine="0",model_name="Qwen/Qwen3-0.6B"} 0.0',
        'vllm:kv_offload_cpu_cache_usage_perc{engine="0",model_name="Qwen/Qwen3-0.6B"} NaN',
    ).replace(
        'vllm:kv_cache_usage_perc{engine="0",model_name="Qwen/Qwen3-0.6B"} 0.0',
        'vllm:kv_cache_usage_perc{engine="0",model_name="Qwen/Qwen3-0.6B"} +Inf',
    )
    assert nan != text
    snap = normalise(nan)
    p0 = advance(None, normalise((H200 / CHAIN[0]).read_text()), 0.0)
    p1 = advance(p0, snap, 60.0)
    body = collect([TargetView("a", "http://x", up=True, snapshot=snap, derived=derive([p0, p1], 60.0, 300.0))], "5m")
    parsed = samples(body)
    assert parsed and all(math.isfinite(s.value) for s in parsed)
    assert "NaN" not in body and "Inf" not in body.replace('le="+Inf"', "")


def test_a_non_finite_value_from_any_source_leaves_the_series_absent() -> None:
    from kvoffload_exporter.expose.render import Exposition

    x = Exposition()
    for v in (math.nan, math.inf, -math.inf):
        x.add("kvoffload_up", v, {"target": "a"})
        x.add_summary(
            "kvoffload_ttft_seconds", {"target": "a", "model_name": "m", "engine": "0", "window": "5m"}, {0.5: v}, v, v
        )
    x.add("kvoffload_up", 1.0, {"target": "b"})
    assert [(s.name, s.value) for s in samples(x.text())] == [("kvoffload_up", 1.0)]

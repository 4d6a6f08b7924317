"""The passive convoy view: normalise reads the deferred-lookup delay, the KV-fetch stages and the queue
time; the exporter exports their windowed quantiles. The native-0.33 reconstruction registers the
families without children, so the samples of a convoy (vllm#44294) are appended here."""

from __future__ import annotations

from pathlib import Path

from kvoffload_exporter.derive.convoy import derive as convoy
from kvoffload_exporter.derive.window import advance, derive
from kvoffload_exporter.expose.collector import TargetView, collect
from kvoffload_exporter.ingest.normalise import normalise
from tests.support.prom import samples

BASE = Path(__file__).parent / "fixtures" / "reconstructed" / "native-0.33"
E = 'engine="0",model_name="Qwen/Qwen3-0.6B"'
BOUNDS = (0.001, 0.01, 0.1, 1.0, 10.0)


def _hist(name: str, counts: tuple[float, ...], total: float) -> str:
    lines = [f'{name}_bucket{{{E},le="{b}"}} {c}' for b, c in zip(BOUNDS, counts)]
    lines += [f'{name}_bucket{{{E},le="+Inf"}} {counts[-1]}', f"{name}_count{{{E}}} {counts[-1]}"]
    return "\n".join([*lines, f"{name}_sum{{{E}}} {total}"]) + "\n"


def _with(text: str, delay: tuple[float, ...], queue: tuple[float, ...], waiting: float) -> str:
    text = text.replace(
        f'vllm:num_requests_kv_fetch_by_stage{{{E},stage="waiting_to_start"}} 0.0',
        f'vllm:num_requests_kv_fetch_by_stage{{{E},stage="waiting_to_start"}} {waiting}',
    )
    return (
        text
        + _hist("vllm:kv_offload_lookup_async_delay_seconds", delay, 1.0)
        + _hist("vllm:request_queue_time_seconds", queue, 1.0)
    )


def test_normalise_reads_the_convoy_families() -> None:
    snap = normalise(_with((BASE / "after-hit.prom").read_text(), (0, 0, 1, 4, 4), (1, 2, 3, 3, 3), 7))
    (e,) = snap.engines
    assert e.lookup_async_delay is not None and e.lookup_async_delay.count == 4
    assert e.queue_time is not None and e.queue_time.bounds == BOUNDS
    assert e.kv_fetch_by_stage["waiting_to_start"] == 7


def test_windowed_p99_and_stages_are_exported() -> None:
    """Only the window's observations count: 10 slow lookups (0.1-1 s) after 100 fast ones."""
    before = normalise(_with((BASE / "before.prom").read_text(), (100, 100, 100, 100, 100), (5, 5, 5, 5, 5), 0))
    after = normalise(_with((BASE / "after-hit.prom").read_text(), (100, 100, 100, 110, 110), (5, 5, 5, 15, 15), 3))
    p0 = advance(None, before, 0.0)
    p1 = advance(p0, after, 60.0)
    views = convoy([p0, p1], 60.0, 300.0)
    (v,) = views.values()
    assert v.lookup_delay_p99 is not None and 0.1 < v.lookup_delay_p99 <= 1.0
    assert v.queue_time[0.5] > 0.1
    view = TargetView("gpu0", "http://x", up=True, snapshot=after, derived=derive([p0, p1], 60.0, 300.0), convoy=views)
    out = {(s.name, s.labels.get("quantile") or s.labels.get("stage")): s.value for s in samples(collect([view], "5m"))}
    assert out[("kvoffload_lookup_async_delay_seconds", "0.99")] == v.lookup_delay_p99
    assert ("kvoffload_request_queue_time_seconds", "0.9") in out
    # _count is vLLM's own, cumulative (110 lookups since start), not the window's 10
    assert out[("kvoffload_lookup_async_delay_seconds_count", None)] == 110
    assert out[("kvoffload_requests_kv_fetch", "waiting_to_start")] == 3


def test_a_restart_starts_the_window_over_from_raw_counts() -> None:
    before = normalise(_with((BASE / "before.prom").read_text(), (100, 100, 100, 100, 100), (5, 5, 5, 5, 5), 0))
    after = normalise(_with((BASE / "after-hit.prom").read_text(), (0, 0, 0, 2, 2), (0, 0, 0, 2, 2), 0))
    p0 = advance(None, before, 0.0)
    (v,) = convoy([p0, advance(p0, after, 60.0)], 60.0, 300.0).values()
    assert v.lookup_delay_p99 is not None and v.lookup_delay_p99 > 0.1

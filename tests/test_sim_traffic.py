"""Traffic generator: seeded Poisson arrivals, Zipf groups, bounded, loopback only."""

from __future__ import annotations

import itertools
from collections import Counter
from typing import Any

import pytest
from support.prom import series

from kvoffload_exporter.sim.sender import check_loopback, send
from kvoffload_exporter.sim.server import make_app
from kvoffload_exporter.sim.simulator import SimOptions, Simulator
from kvoffload_exporter.sim.traffic import TrafficSpec, arrivals, zipf_weights


def test_arrivals_are_seeded_and_bounded() -> None:
    spec = TrafficSpec(rate=50, count=200, seed=3)
    a, b = list(arrivals(spec)), list(arrivals(spec))
    assert a == b and len(a) == 200
    assert all(x.at < y.at for x, y in itertools.pairwise(a))
    assert list(arrivals(TrafficSpec(rate=50, count=200, seed=4))) != a
    timed = list(arrivals(TrafficSpec(rate=50, duration=2.0)))
    assert timed and timed[-1].at <= 2.0 and 50 < len(timed) < 150  # Poisson: 100 expected
    with pytest.raises(ValueError, match="bounded"):
        list(arrivals(TrafficSpec(rate=1)))


def test_zipf_popularity_and_shared_prefixes() -> None:
    spec = TrafficSpec(rate=100, count=2000, groups=8, zipf=1.2, shared=0.9, seed=1)
    reqs = list(arrivals(spec))
    groups = Counter(r.group for r in reqs)
    shared = [g for g in groups if g is not None]
    assert groups[0] == max(groups[g] for g in shared) and groups[0] > 2 * groups[7]
    assert 0.85 < sum(groups[g] for g in shared) / len(reqs) < 0.95
    assert zipf_weights(3, 1.0) == pytest.approx([6 / 11, 3 / 11, 2 / 11])
    by_group: dict[int, tuple[int, ...]] = {}
    for r in reqs:
        if r.group is None:
            continue
        head = by_group.setdefault(r.group, r.prompt)
        n = min(len(head), len(r.prompt)) // 2
        assert r.prompt[:n] == head[:n]  # same group → same prefix


def test_prompt_lengths_fit_the_model() -> None:
    spec = TrafficSpec(rate=100, count=500, prefix_tokens=6000, prefix_sigma=1.0, max_prompt_tokens=4096, max_tokens=16)
    for r in arrivals(spec):
        assert len(r.prompt) >= 1 and len(r.prompt) + r.max_tokens <= 4096


def test_loopback_only() -> None:
    for ok in ("http://127.0.0.1:8000", "http://localhost:1", "http://[::1]:8000", "http://127.3.2.1"):
        check_loopback(ok)
    for bad in ("http://10.0.0.1:8000", "http://example.com", "http://0.0.0.0:8000"):
        with pytest.raises(ValueError):
            check_loopback(bad)


async def test_sender_drives_a_simulator(aiohttp_server: Any) -> None:
    sim = Simulator(SimOptions(seed=2, time_scale=0.01))
    server = await aiohttp_server(make_app(sim))
    spec = TrafficSpec(rate=100, count=40, groups=3, prefix_tokens=1024, tail_tokens=32, max_tokens=2, seed=9)
    report = await send(str(server.make_url("")), spec)
    assert (report.sent, report.ok, report.errors) == (40, 40, 0)
    assert report.cached_tokens > 0 and len(report.ttft_ms) == 40
    counters = series(sim.metrics_text())
    assert counters['vllm:request_success_total{finished_reason="length"}'] == 40
    assert counters["vllm:prefix_cache_hits_total"] > 0
    assert "40 sent = 40 ok + 0 failed + 0 in flight when stopped; 0 not sent" in report.summary()

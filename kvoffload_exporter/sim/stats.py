"""Counters, gauges and histograms of one simulated engine, keyed by vLLM family base name.

The engine writes here; `profiles` decides per vLLM version which of these become families. A child
(label set) exists once written; `created` keeps its creation time for the `_created` series.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable
from dataclasses import dataclass, field

LabelValues = tuple[str, ...]

_LATENCY = (
    0.3,
    0.5,
    0.8,
    1.0,
    1.5,
    2.0,
    2.5,
    5.0,
    10.0,
    15.0,
    20.0,
    30.0,
    40.0,
    50.0,
    60.0,
    120.0,
    240.0,
    480.0,
    960.0,
    1920.0,
    7680.0,
)
_ITL = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0)
_OFFLOAD_SIZE = (1e6, 5e6, 10e6, 20e6, 40e6, 60e6, 80e6, 100e6, 150e6, 200e6)

FIXED_BOUNDS: dict[str, tuple[float, ...]] = {
    "time_to_first_token_seconds": (
        0.001,
        0.005,
        0.01,
        0.02,
        0.04,
        0.06,
        0.08,
        0.1,
        0.25,
        0.5,
        0.75,
        1.0,
        2.5,
        5.0,
        7.5,
        10.0,
        20.0,
        40.0,
        80.0,
        160.0,
        640.0,
        2560.0,
    ),
    "inter_token_latency_seconds": _ITL,
    "time_per_output_token_seconds": _ITL,
    "request_time_per_output_token_seconds": _ITL,
    "e2e_request_latency_seconds": _LATENCY,
    "request_queue_time_seconds": _LATENCY,
    "request_inference_time_seconds": _LATENCY,
    "request_prefill_time_seconds": _LATENCY,
    "request_decode_time_seconds": _LATENCY,
    "iteration_tokens_total": (1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384),
    "request_params_n": (1, 2, 5, 10, 20),
    "request_num_preemptions": (1, 2, 3, 4, 5, 10, 20),
    "kv_offload_size": _OFFLOAD_SIZE,
    "kv_offload_load_size": _OFFLOAD_SIZE,
    "kv_offload_store_size": _OFFLOAD_SIZE,
    "kv_offload_lookup_sync_delay_seconds": (1e-5, 5e-5, 1e-4, 5e-4, 1e-3, 5e-3, 0.01, 0.05, 0.1, 0.5, 1.0),
    "kv_offload_lookup_async_delay_seconds": (1e-4, 5e-4, 1e-3, 5e-3, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 10.0),
    "kv_offload_cpu_allocation_size": (1, 4, 16, 64, 256, 1024, 4096, 16384, 65536, 262144),
}
# Token-count histograms use vLLM's 1-2-5 series up to max_model_len.
TOKEN_HISTOGRAMS = (
    "request_prompt_tokens",
    "request_generation_tokens",
    "request_max_num_generation_tokens",
    "request_params_max_tokens",
    "request_prefill_kv_computed_tokens",
)


def buckets_1_2_5(max_value: int) -> tuple[float, ...]:
    out: list[float] = []
    exp = 1
    while True:
        for m in (1, 2, 5):
            v = m * exp
            if v > max_value:
                return tuple(out)
            out.append(float(v))
        exp *= 10


def bounds_for(name: str, max_model_len: int) -> tuple[float, ...]:
    if name in TOKEN_HISTOGRAMS:
        return buckets_1_2_5(max_model_len)
    return tuple(float(b) for b in FIXED_BOUNDS[name])


@dataclass
class Hist:
    bounds: tuple[float, ...]
    counts: list[float] = field(default_factory=list)  # per bucket, not cumulative; last is +Inf
    sum: float = 0.0
    count: float = 0.0

    def __post_init__(self) -> None:
        if not self.counts:
            self.counts = [0.0] * (len(self.bounds) + 1)

    def observe(self, value: float) -> None:
        self.counts[bisect.bisect_left(self.bounds, value)] += 1  # le is inclusive
        self.sum += value
        self.count += 1

    def cumulative(self) -> list[float]:
        out, run = [], 0.0
        for c in self.counts:
            run += c
            out.append(run)
        return out


class EngineStats:
    """Everything one engine has counted since it (re)started."""

    def __init__(self, wall: Callable[[], float], max_model_len: int):
        self._wall = wall
        self.max_model_len = max_model_len
        self.started = wall()
        self.counters: dict[str, dict[LabelValues, float]] = {}
        self.gauges: dict[str, dict[LabelValues, float]] = {}
        self.hists: dict[str, dict[LabelValues, Hist]] = {}
        self.created: dict[tuple[str, LabelValues], float] = {}

    def _born(self, name: str, labels: LabelValues) -> None:
        self.created.setdefault((name, labels), self._wall())

    def inc(self, name: str, value: float = 1.0, labels: LabelValues = ()) -> None:
        child = self.counters.setdefault(name, {})
        if labels not in child:
            self._born(name, labels)
        child[labels] = child.get(labels, 0.0) + value

    def set(self, name: str, value: float, labels: LabelValues = ()) -> None:
        self.gauges.setdefault(name, {})[labels] = value

    def observe(self, name: str, value: float, labels: LabelValues = ()) -> None:
        child = self.hists.setdefault(name, {})
        if labels not in child:
            self._born(name, labels)
            child[labels] = Hist(bounds_for(name, self.max_model_len))
        child[labels].observe(value)

    def hist_bounds(self, name: str) -> tuple[float, ...]:
        return bounds_for(name, self.max_model_len)

    def counter(self, name: str, labels: LabelValues = ()) -> float:
        return self.counters.get(name, {}).get(labels, 0.0)

    def created_at(self, name: str, labels: LabelValues) -> float:
        return self.created.get((name, labels), self.started)

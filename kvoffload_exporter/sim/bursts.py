"""The simulator's load model in isolation: bursts of c revisits of one displaced prefix vs c with loads
disabled, on one noise-free engine with a stepped clock (no server, no wall time).

Why: `bench/load_sweep.py` and the tests read the modelled crossover straight from the engine, so a
change of the load model shows up as numbers, not as a flaky wall-clock test. Pure.
"""

from __future__ import annotations

import random
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from kvoffload_exporter.sim.engine import SimRequest
from kvoffload_exporter.sim.simulator import SimOptions, Simulator


@dataclass(frozen=True)
class BurstResult:
    concurrency: int
    offload_ms: float  # median client TTFT of the c revisits served from the CPU tier
    control_ms: float  # median client TTFT of the c revisits with max_load_tokens 0

    @property
    def delta_ms(self) -> float:
        return self.offload_ms - self.control_ms


def bursts(
    calibration: str,
    levels: Sequence[int],
    timing: Mapping[str, float] | None = None,
    prefix_tokens: int = 5120,
    tail_tokens: int = 8,
) -> list[BurstResult]:
    """Per level: seed A and B, displace both with three fillers, burst A (tier) and B (recompute)."""
    now = [0.0]
    opts = SimOptions(calibration=calibration, version="0.32.0", noise=False, timing=dict(timing or {}))
    eng = Simulator(opts, clock=lambda: now[0]).engines[0]
    rng = random.Random(1)

    def toks(n: int) -> tuple[int, ...]:
        return tuple(rng.randrange(1000, 30000) for _ in range(n))

    def settle() -> None:
        now[0] += 5.0
        eng.advance()

    out = []
    filler = prefix_tokens + tail_tokens
    for c in levels:
        a, b = toks(prefix_tokens), toks(prefix_tokens)
        for p in (a + toks(tail_tokens), b + toks(tail_tokens), toks(filler), toks(filler), toks(filler)):
            eng.submit(SimRequest(p, max_tokens=1))
            settle()
        med = []
        for prefix, kv in ((a, None), (b, {"max_load_tokens": 0})):
            t0 = now[0]
            plans = [eng.submit(SimRequest(prefix + toks(tail_tokens), 1, kv_transfer_params=kv), t0) for _ in range(c)]
            med.append(statistics.median((p.client_time(0) - t0) * 1000 for p in plans))
            settle()
        out.append(BurstResult(c, med[0], med[1]))
    return out


__all__ = ["BurstResult", "bursts"]

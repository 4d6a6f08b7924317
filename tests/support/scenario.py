"""The H200 canary chain as a script (test support, not shipped): drive a `Simulator` on a manual clock.

Reproduces the request sequence behind the real captures (fixtures `h200-0.6b` and `h200-32b`,
real-runs §1): every measured request is followed by 0.5 s, a fresh 4-token flush request and 0.5 s
more, then a scrape. `run_chain` returns the exposition at the same points as the fixture files and
every measured request's plan, so tests compare counter deltas and the calibration table is built
from the same run.
"""

from __future__ import annotations

import random
import statistics
from dataclasses import dataclass, field
from typing import Any

from kvoffload_exporter.sim.engine import Plan, SimRequest
from kvoffload_exporter.sim.simulator import SimOptions, Simulator

SETTLE_S = 0.5
CYCLES = 10


class ManualClock:
    """Model time that moves only when told to."""

    def __init__(self, start: float = 1000.0):
        self.now = start

    def __call__(self) -> float:
        return self.now


@dataclass
class ChainRun:
    snapshots: dict[str, str] = field(default_factory=dict)  # fixture file name → /metrics text
    plans: list[tuple[str, Plan]] = field(default_factory=list)  # (kind, plan) of measured requests


class _Driver:
    def __init__(self, sim: Simulator, clock: ManualClock, prompt_len: int, seed: int):
        self.sim, self.clock = sim, clock
        self.engine = sim.engines[0]
        self.rng = random.Random(seed + 1)
        self.P = self.fresh(prompt_len, random.Random(seed))
        self.prompt_len = prompt_len
        self.run = ChainRun()

    def fresh(self, n: int, rng: random.Random | None = None) -> tuple[int, ...]:
        r = rng or self.rng
        return tuple(r.randrange(1000, 150_000) for _ in range(n))

    def send(self, prompt: tuple[int, ...], kind: str | None = None, **kw: Any) -> Plan:
        plan = self.engine.submit(SimRequest(prompt, max_tokens=1, **kw), self.clock())
        self.clock.now = plan.finish_at + plan.timing.frontend_s + SETTLE_S
        if kind:
            self.run.plans.append((kind, plan))
        return plan

    def flushed(self, prompt: tuple[int, ...], kind: str | None = None, **kw: Any) -> Plan:
        plan = self.send(prompt, kind, **kw)
        self.send(self.fresh(4))
        return plan

    def pressure(self) -> None:
        for _ in range(2):
            self.send(self.fresh(self.prompt_len), "pressure")
        self.flushed(self.fresh(self.prompt_len), "pressure")

    def salt(self) -> str:
        return f"salt-{self.rng.randrange(1 << 30):x}"

    def snap(self, name: str) -> None:
        self.run.snapshots[name] = self.sim.metrics_text()


def run_chain(opts: SimOptions, phase: str = "A", prompt_len: int = 6000, seed: int = 20261129) -> ChainRun:
    """Phase "A" (with the CPU tier) or "B" (no connector) of the real canary pass, N = 10."""
    clock = ManualClock()
    sim = Simulator(opts, clock=clock, wall=lambda: 1.7e9 + clock.now)
    d = _Driver(sim, clock, prompt_len, seed)
    P = d.P
    d.send(d.fresh(64))  # smoke request right after /health; its one chunk is reported before A_00
    clock.now += sim.config.store_report_delay_s
    d.snap(f"{phase}_00_initial.prom")
    W = d.fresh(prompt_len)
    d.flushed(W, "warmup")
    d.flushed(W, "warmup")
    d.pressure()
    d.flushed(W, "warmup")
    if phase == "A":
        d.flushed(W, "warmup", cache_salt="warm-salt")
    d.snap(f"{phase}_01_before_cold.prom")
    d.flushed(P, "cold")
    d.snap(f"{phase}_02_after_cold.prom")
    d.flushed(P, "gpu_hit")
    d.snap(f"{phase}_03_after_gpu_hit.prom")
    d.pressure()
    d.snap(f"{phase}_04_after_pressure.prom")
    evicted = "cpu_hit" if phase == "A" else "recompute_no_tier"
    for cycle in range(CYCLES):
        if cycle:
            d.pressure()
        d.flushed(P, evicted)
        if cycle == 0:
            d.snap(f"{phase}_05_after_{'cpu_tier_hit' if phase == 'A' else 'recompute_no_tier'}.prom")
        d.flushed(P, "gpu_hit")
        if cycle == 0:
            d.snap(f"{phase}_06_after_gpu_hit_again.prom")
        d.flushed(P, "cold_salt", cache_salt=d.salt())
        if cycle == 0:
            d.snap(f"{phase}_07_after_salted_cold.prom")
        if phase == "A":
            d.pressure()
            if cycle == 0:
                d.snap("A_08_before_max_load_tokens_0.prom")
            d.flushed(P, "max_load_0", kv_transfer_params={"max_load_tokens": 0})
            if cycle == 0:
                d.snap("A_09_after_max_load_tokens_0.prom")
    if phase == "A":
        d.pressure()
        d.snap("A_10_before_partial_hit.prom")
        d.flushed(P[:4096] + d.fresh(prompt_len - 4096), "partial_cpu_hit")
        d.snap("A_11_after_partial_hit.prom")
        d.snap("A_12_final.prom")
    else:
        d.snap("B_08_final.prom")
    return d.run


def modelled_ttft_ms(calibration: str, seed: int = 1) -> dict[tuple[str, str], float]:
    """Noise-free client TTFT medians per (phase, kind) from the simulated canary chain."""
    out = {}
    for phase in ("A", "B"):
        run = run_chain(SimOptions(calibration=calibration, seed=seed, noise=False, connector=phase == "A"), phase)
        kinds: dict[str, list[float]] = {}
        for kind, plan in run.plans:
            kinds.setdefault(kind, []).append(plan.timing.client_ttft_s * 1e3)
        out.update({(phase, k): statistics.median(v) for k, v in kinds.items()})
    return out

"""The simulated model's greedy output: a function of the prompt, blind to all but the last token on
request, and wrong for tier-served requests under the corrupt-loads fault."""

from __future__ import annotations

from typing import Any

import pytest
from support.scenario import ManualClock

from kvoffload_exporter.commands.simulate import fraction
from kvoffload_exporter.sim.engine import Plan, SimRequest
from kvoffload_exporter.sim.faults import FaultError, parse_fault
from kvoffload_exporter.sim.output import output_ids
from kvoffload_exporter.sim.simulator import SimOptions, Simulator

P = tuple(range(1000, 3048))


def manual(**opts: Any) -> tuple[Simulator, ManualClock]:
    clock = ManualClock()
    return Simulator(SimOptions(seed=5, noise=False, **opts), clock=clock, wall=lambda: 1.7e9 + clock.now), clock


def send(sim: Simulator, clock: ManualClock, prompt: tuple[int, ...], max_tokens: int = 8) -> Plan:
    plan = sim.engines[0].submit(SimRequest(prompt, max_tokens=max_tokens, cache_salt="s"), clock())
    clock.now = plan.finish_at + 0.5
    sim.engines[0].submit(SimRequest((1, 2, 3, 4), max_tokens=1), clock())  # flush: stores get reported
    clock.now += 1.0
    return plan


def evict(sim: Simulator, clock: ManualClock) -> None:
    for base in (100_000, 200_000, 300_000):
        send(sim, clock, tuple(range(base, base + 4000)), 1)


def test_an_early_token_changes_the_whole_prompt_output_but_not_the_last_token_one() -> None:
    changed = (P[0] + 1, *P[1:])
    assert output_ids(P, 8) == output_ids(P, 8)
    assert output_ids(P, 8) != output_ids(changed, 8)
    assert output_ids(P, 8, "last-token") == output_ids(changed, 8, "last-token")
    assert output_ids(P, 8, "last-token") != output_ids((*P[:-1], P[-1] + 1), 8, "last-token")


def test_gpu_hit_offload_hit_and_recompute_answer_the_same_tokens() -> None:
    sim, clock = manual()
    seed = send(sim, clock, P)
    gpu = send(sim, clock, P)
    evict(sim, clock)
    tier = send(sim, clock, P)
    assert gpu.gpu_hit > 0 and tier.external_hit > 0 and seed.cached == 0
    assert seed.output_ids == gpu.output_ids == tier.output_ids == output_ids(P, 8)


def test_corrupt_loads_changes_only_tier_served_answers() -> None:
    sim, clock = manual(faults=("corrupt-loads=1",))
    seed = send(sim, clock, P)
    gpu = send(sim, clock, P)
    evict(sim, clock)
    tier = send(sim, clock, P)
    assert tier.external_hit > 0
    assert seed.output_ids == gpu.output_ids
    assert all(a != b for a, b in zip(tier.output_ids, gpu.output_ids))


@pytest.mark.parametrize("bad", ["corrupt-loads=0", "corrupt-loads=1.5", "corrupt-loads=x"])
def test_corrupt_loads_must_be_a_fraction(bad: str) -> None:
    with pytest.raises(FaultError):
        parse_fault(bad)


def test_the_flag_refuses_what_is_no_fraction() -> None:
    assert fraction("0.25") == 0.25
    for bad in ("-0.1", "2", "nan", "x"):
        with pytest.raises(Exception, match=r"fraction|number"):
            fraction(bad)

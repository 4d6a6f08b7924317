"""Token budget per sliding hour and back-off."""

from __future__ import annotations

import random

from kvoffload_exporter.canary.cycle.budget import Backoff, TokenBudget


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def test_budget_is_a_sliding_hour() -> None:
    clock = Clock()
    b = TokenBudget(100, clock)
    assert b.remaining() == 100 and b.can_spend(100) and not b.can_spend(101)
    b.spend(60)
    clock.t += 1800
    b.spend(30)
    assert b.remaining() == 10 and not b.can_spend(11)
    assert b.seconds_until(50) == 1800  # the first 60 expire an hour after they were spent
    clock.t += 1800
    assert b.remaining() == 70
    assert b.total == 90
    assert b.seconds_until(101) == float("inf")


def test_unlimited_budget() -> None:
    b = TokenBudget(None, Clock())
    b.spend(10**9)
    assert b.remaining() is None and b.can_spend(10**9) and b.seconds_until(5) == 0.0


def test_backoff_doubles_with_jitter_and_honours_retry_after() -> None:
    b = Backoff(1.0, 8.0, random.Random(3))
    d = [b.failure() for _ in range(6)]
    assert 0.5 <= d[0] <= 1.0 and 1.0 <= d[1] <= 2.0 and 2.0 <= d[2] <= 4.0
    assert all(4.0 <= x <= 8.0 for x in d[3:])  # capped
    assert b.failure(retry_after=30.0) == 8.0  # Retry-After, but never beyond the cap
    b.success()
    assert b.failure(retry_after=0.9) >= 0.9


def test_default_backoffs_do_not_retry_in_lockstep() -> None:
    """Two replicas built the default way (no RNG injected) draw different jitter."""
    a, b = Backoff(1.0, 1e9), Backoff(1.0, 1e9)
    da = [a.failure() for _ in range(20)]
    db = [b.failure() for _ in range(20)]
    assert da != db
    for x, y, n in zip(da, db, range(20)):
        assert 0.5 * 2**n <= min(x, y) and max(x, y) <= 2**n  # both still inside the doubling band


def test_an_injected_rng_is_reproducible() -> None:
    a, b = Backoff(1.0, 8.0, random.Random(5)), Backoff(1.0, 8.0, random.Random(5))
    assert [a.failure() for _ in range(5)] == [b.failure() for _ in range(5)]


# --- the default budget reaches a verdict within an hour; the budget lines are not repeated ---------------

import logging
from types import SimpleNamespace

import pytest

from kvoffload_exporter.canary.config import CanarySettings
from kvoffload_exporter.canary.cycle import plan
from kvoffload_exporter.canary.cycle.budget import HOUR, Notices, cycles_per_hour, minutes_to_verdict
from kvoffload_exporter.canary.cycle.engine import CYCLES, CanaryEngine
from kvoffload_exporter.canary.cycle.prepared import PreparedRun
from kvoffload_exporter.canary.types import Strategy
from kvoffload_exporter.sim.calibration import CALIBRATIONS


def _cycle_cost(calibration: str, strategy: Strategy, prefix: int | None, control: bool, first: bool = False) -> int:
    """One cycle's budgeted cost, computed by the engine's own code for a reference shape; `first`: with
    the output check's sensitivity probe, which runs once a run."""
    cal = CALIBRATIONS[calibration]
    s = CanarySettings(strategy=strategy, allow_pressure=True, prefix_tokens=prefix)
    e = CanaryEngine(
        "http://127.0.0.1:1",
        s,
        None,
        plan.Prompts(b"k" * 32, "n"),
        control_url="http://127.0.0.1:2" if control else None,
    )  # type: ignore[arg-type]
    facts = plan.CacheFacts(cal.block_size, cal.num_gpu_blocks, None, cal.max_model_len, True)
    resident = 2 if strategy == Strategy.WAIT else 1
    sizing = plan.size(facts, prefix, resident=resident)
    if not first:
        e.state.output.sensitive = True
    run = PreparedRun(e, SimpleNamespace(sizing=sizing))  # type: ignore[arg-type]
    return CYCLES[strategy].cost(run)


REFERENCE = [
    # calibration, strategy, --prefix-tokens (None: the planner's), control target
    ("h200-qwen3-0.6b", Strategy.WAIT, None, False),
    ("h200-qwen3-0.6b", Strategy.PRESSURE, None, False),
    ("h200-qwen3-0.6b", Strategy.PRESSURE, None, True),
    ("h200-qwen3-32b", Strategy.PRESSURE, 6000, False),  # the real 32B run's prefix
    ("h200-qwen3-32b", Strategy.PRESSURE, 6000, True),
]


@pytest.mark.parametrize(("calibration", "strategy", "prefix", "control"), REFERENCE)
def test_default_budget_gives_ten_samples_within_an_hour(
    calibration: str, strategy: Strategy, prefix: int | None, control: bool
) -> None:
    """10 cycles (min_samples) must fit one sliding hour at the default budget (200k allowed 4-5)."""
    s = CanarySettings()
    cost = _cycle_cost(calibration, strategy, prefix, control)
    assert s.budget_tokens_per_hour is not None
    first = _cycle_cost(calibration, strategy, prefix, control, first=True)
    assert (s.min_samples - 1) * cost + first <= s.budget_tokens_per_hour, (cost, first)
    assert minutes_to_verdict(s.min_samples, cost, s.budget_tokens_per_hour, s.interval) <= 60


def test_reference_cycle_costs_match_docs() -> None:
    """The numbers docs/canary.md shows in its budget arithmetic."""
    got = [_cycle_cost(*r) for r in REFERENCE]
    assert got == [36_844, 46_243, 51_384, 53_155, 59_064]


def test_cycles_per_hour_and_eta() -> None:
    assert cycles_per_hour(50_000, 600_000, 300.0) == 12.0  # the interval is the limit
    assert cycles_per_hour(50_000, 200_000, 300.0) == 4.0  # the budget is
    assert cycles_per_hour(50_000, None, 300.0) == HOUR / 300.0
    assert cycles_per_hour(50_000, 40_000, 300.0) == 0.0  # never fits
    assert minutes_to_verdict(10, 50_000, 200_000, 300.0) == 150.0
    assert minutes_to_verdict(0, 50_000, 200_000, 300.0) == 0.0
    assert minutes_to_verdict(3, 50_000, 40_000, 300.0) == float("inf")


def test_budget_message_is_info_once_then_debug() -> None:
    n = Notices()
    assert [n.budget_level() for _ in range(4)] == [logging.INFO] + [logging.DEBUG] * 3


def test_verdict_eta_is_said_once_and_again_only_when_it_changes() -> None:
    n = Notices()
    first = n.verdict_eta(0.0, 10, 50_000, 200_000, 300.0)
    assert first is not None and "next verdict in ~150 min" in first and "token budget" in first
    # A cycle later the forecast merely counted down: nothing new to say.
    assert n.verdict_eta(900.0, 9, 50_000, 200_000, 300.0) is None
    assert n.verdict_eta(1800.0, 8, 50_000, 200_000, 300.0) is None
    # The budget was raised (or a cycle got cheaper): a different forecast is said once.
    changed = n.verdict_eta(2000.0, 8, 50_000, 600_000, 300.0)
    assert changed is not None and "~40 min" in changed and "interval" in changed
    assert n.verdict_eta(2300.0, 7, 50_000, 600_000, 300.0) is None
    assert n.verdict_eta(2600.0, 0, 50_000, 600_000, 300.0) is None  # enough samples: nothing to forecast
    never = Notices().verdict_eta(0.0, 10, 50_000, 40_000, 300.0)
    assert never is not None and "does not fit" in never


def test_serve_loop_logs_budget_and_eta_once(caplog: pytest.LogCaptureFixture) -> None:
    """The engine's "no full cycle" line at INFO once, DEBUG after; the ETA line once (schedule.py)."""
    import asyncio

    from kvoffload_exporter.canary import schedule

    s = CanarySettings(budget_tokens_per_hour=10, interval=300.0)
    e = CanaryEngine("http://127.0.0.1:1", s, None, plan.Prompts(b"k" * 32, "n"))  # type: ignore[arg-type]
    cost = 1000
    e.prepared = SimpleNamespace(strategy=Strategy.WAIT)  # type: ignore[assignment]
    e.cycle_cost_of = lambda run: cost  # type: ignore[method-assign]
    CYCLES_COST = SimpleNamespace(name=Strategy.WAIT, cost=lambda run: cost)
    e.cycle_of = lambda run: CYCLES_COST  # type: ignore[assignment,method-assign,return-value]
    slept: list[float] = []

    async def sleep(t: float) -> None:
        slept.append(t)
        if len(slept) >= 5:
            raise asyncio.CancelledError

    e.sleep = sleep
    caplog.set_level(logging.DEBUG, logger="kvoffload.canary")
    with pytest.raises(asyncio.CancelledError):
        asyncio.run(schedule.run_forever(e))
    budget = [r for r in caplog.records if "budget allows no full cycle" in r.getMessage()]
    assert [r.levelno for r in budget] == [logging.INFO] + [logging.DEBUG] * 4
    eta = [r for r in caplog.records if "verdict" in r.getMessage()]
    assert len(eta) == 1 and eta[0].levelno == logging.INFO and "does not fit" in eta[0].getMessage()


def test_verdict_eta_follows_the_counting_rate_and_states_its_basis() -> None:
    """Half the cycles counted: twice the minutes, said with its basis, and not re-said as it counts down."""
    from kvoffload_exporter.canary.cycle.budget import Notices

    n = Notices()
    msg = n.verdict_eta(0.0, 10, 10_000, None, 60.0, per_cycle=0.5)
    assert msg is not None and msg.startswith("next verdict in ~20 min") and "0.50 counted a cycle" in msg
    assert n.verdict_eta(60.0, 9, 10_000, None, 60.0, per_cycle=0.5) is None  # on its own countdown

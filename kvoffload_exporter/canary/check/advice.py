"""One decision, one piece of advice: `check`'s evidence (headline interval, sweep levels, payback, state)
turned into the single `advice` the report prints; pure.

The rules (docs/canary.md, "Advice"): an interval that includes 0 supports exactly one action, measure
longer; a level counts only when its interval excludes 0; "skip loads below c = N" needs a decidedly slower
level below a decidedly faster one; disabling loads needs every measured level decidedly slower. When the
payback model and the measured ΔTTFT disagree, the measured ΔTTFT wins (it is measured at the load the
operator runs; the model assumes a per-token prefill cost and ignores queueing) and `why` says so.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING, TypedDict

if TYPE_CHECKING:
    from kvoffload_exporter.canary.check.sweepreport import SweepEntry

FASTER, SLOWER = "offload_faster", "offload_slower"


class Action(StrEnum):
    KEEP = "keep"
    DISABLE_LOADS = "disable_loads"
    SKIP_LOADS_BELOW = "skip_loads_below"
    GROW_TIER = "grow_tier"
    SHRINK_TIER = "shrink_tier"
    MEASURE_LONGER = "measure_longer"
    CHECK_CONNECTOR = "check_connector"  # stores or lookups fail without a size problem (canary/check/diagnose.py)
    DISABLE_OFFLOAD = "disable_offload"  # an offload hit answered other tokens (canary/cycle/outputcheck.py)
    # The run could not measure: the action names what to fix before re-running (never measure_longer).
    FIX_TARGET = "fix_target"  # the target refused or failed the canary's requests (preflight, a 4xx, the deadline)
    FIX_CONTROL = "fix_control"  # the control target cannot be the control (another model, refusals, too short)
    CONFIGURE_OFFLOAD = "configure_offload"  # the target has no offload connector at all
    FIX_SECRET_FILE = "fix_secret_file"  # the API key file or the canary secret cannot be read or created
    REPORT_BUG = "report_bug"  # check itself failed on an answer nothing foresaw (an internal error)


EXIT_CODES: dict[Action, int] = {
    Action.KEEP: 0,
    Action.SHRINK_TIER: 0,
    Action.DISABLE_LOADS: 1,
    Action.SKIP_LOADS_BELOW: 1,
    Action.GROW_TIER: 3,
    Action.MEASURE_LONGER: 4,
    Action.CHECK_CONNECTOR: 3,
    Action.DISABLE_OFFLOAD: 5,
    Action.FIX_TARGET: 3,
    Action.FIX_CONTROL: 3,
    Action.CONFIGURE_OFFLOAD: 3,
    Action.FIX_SECRET_FILE: 3,
    Action.REPORT_BUG: 3,
}
"""`check`'s exit code follows the run's one advice, never a single level: 0 keep the tier, 1 offload does not
pay (disable or skip loads), 3 fix something first: the tier is misconfigured or the run could not measure,
4 measure longer, 5 the tier changed answers (output_mismatch, before every speed verdict). A CI gate on the
exit code therefore reads the same decision as the report."""

CANNOT_MEASURE: frozenset[Action] = frozenset(
    {Action.FIX_TARGET, Action.FIX_CONTROL, Action.CONFIGURE_OFFLOAD, Action.FIX_SECRET_FILE, Action.REPORT_BUG}
)
"""The actions of a run that could not measure (verdict `error`)."""

FIXES: dict[Action, str] = {
    Action.FIX_TARGET: "fix the target as its answer above says (or the flags that shape the request, e.g. "
    "`--prefix-tokens`, `--model`, the API key) and re-run",
    Action.FIX_CONTROL: "point `--control-target` at a server of the same model without the connector that answers "
    "the canary's requests (or leave it out) and re-run",
    Action.CONFIGURE_OFFLOAD: "configure an offload connector on the target (`--kv-transfer-config` with the "
    "OffloadingConnector) and re-run, or pass `--allow-no-offload` to measure without one",
    Action.FIX_SECRET_FILE: "fix the file named above (`--api-key-file`, `canary.secret_file`) and re-run",
    Action.REPORT_BUG: "this is a bug in kvoffload-exporter: report it with the evidence bundle (`--out`)",
}
"""What a run that could not measure asks for, per action (the `why` of its advice)."""


class AdviceDoc(TypedDict):
    """`advice` of the check document."""

    action: str
    concurrency: int | None
    why: str


@dataclass(frozen=True)
class Advice:
    action: Action
    concurrency: int | None
    why: str

    def as_dict(self) -> AdviceDoc:
        return {"action": str(self.action), "concurrency": self.concurrency, "why": self.why}

    def line(self) -> str:
        at = f" (c = {self.concurrency})" if self.concurrency is not None else ""
        return f"advice: {self.action}{at} - {self.why}"


@dataclass(frozen=True)
class LevelFact:
    """One measured concurrency at the rounds' prefix length."""

    concurrency: int
    verdict: str
    delta: float | None


@dataclass(frozen=True)
class Evidence:
    """What the decision may look at (typed; built from the result objects, never from prose)."""

    verdict: str  # the headline verdict (the ordinary rounds, c = 1)
    verdict_why: str
    levels: tuple[LevelFact, ...] = ()  # sweep levels at the rounds' prefix, c = 1 included when measured
    payback_action: str | None = None  # the payback model's action over the run (kvoffload_exporter.derive.payback)
    payback_why: str | None = None
    state_reasons: tuple[str, ...] = ()  # the exporter's state reasons over the run, per engine
    error: str | None = None
    error_action: Action = Action.FIX_TARGET  # what fixes `error` (CANNOT_MEASURE)
    config_failure: Advice | None = None  # the run stopped on a misconfigured tier (canary/check/diagnose.py)


def _cs(cs: Sequence[int]) -> str:
    return ", ".join(str(c) for c in cs)


def _from_levels(levels: Sequence[LevelFact]) -> Advice:
    rows = sorted(levels, key=lambda lv: lv.concurrency)
    faster = [lv.concurrency for lv in rows if lv.verdict == FASTER]
    slower = [lv.concurrency for lv in rows if lv.verdict == SLOWER]
    open_ = [lv.concurrency for lv in rows if lv.verdict not in (FASTER, SLOWER)]
    tail = f"; undecided at c = {_cs(open_)} (interval includes 0 or too few bursts)" if open_ else ""
    if not faster and not slower:
        return Advice(
            Action.MEASURE_LONGER,
            None,
            f"no measured level decided (c = {_cs([lv.concurrency for lv in rows])}): every interval includes 0 "
            "or has too few bursts; offload pays off at no measured level - re-run with more bursts "
            "(`--min-bursts`) before acting",
        )
    if faster and not slower:
        return Advice(Action.KEEP, None, f"loads pay off at c = {_cs(faster)} and are slower at no level{tail}")
    if slower and not faster:
        if open_:
            return Advice(
                Action.MEASURE_LONGER,
                None,
                f"loads are slower at c = {_cs(slower)} and pay off at no measured level{tail}: measure those "
                "levels longer before disabling loads",
            )
        return Advice(
            Action.DISABLE_LOADS,
            None,
            f"loads are slower than the control at every measured level (c = {_cs(slower)}) and pay off at no "
            "measured level: disable loading (`max_load_tokens: 0`) or the tier, or re-measure with longer prefixes",
        )
    if max(slower) < min(faster):
        n = min(faster)
        return Advice(
            Action.SKIP_LOADS_BELOW,
            n,
            f"loads are slower at c = {_cs(slower)} and pay off from c = {n}{tail}: skip loads while fewer than "
            f"{n} requests run (per request `kv_transfer_params: {{max_load_tokens: 0}}`, e.g. a router rule)",
        )
    if max(faster) < min(slower):
        return Advice(
            Action.KEEP,
            None,
            f"loads pay off up to c = {max(faster)} and are slower at c = {_cs(slower)}{tail}: keep the tier and "
            "cap loads under high concurrency (`max_load_tokens` below the prefix while many requests are in "
            "flight; concurrent loads of one prefix queue, vllm#44294)",
        )
    return Advice(
        Action.MEASURE_LONGER,
        None,
        f"decided levels disagree without one crossover (faster at c = {_cs(faster)}, slower at c = "
        f"{_cs(slower)}): measure longer before acting",
    )


def _from_headline(ev: Evidence) -> Advice:
    if ev.verdict == FASTER:
        return Advice(Action.KEEP, None, f"loads pay off: {ev.verdict_why}")
    if ev.verdict == SLOWER:
        return Advice(
            Action.DISABLE_LOADS,
            None,
            f"{ev.verdict_why}; measured at c = 1 only: add `--concurrency` to see whether it pays off under load "
            "before disabling loads for all traffic",
        )
    if ev.verdict == "no_offload_hit":
        return Advice(
            Action.MEASURE_LONGER,
            None,
            f"{ev.verdict_why}: the tier served none of the displaced revisits, so there is no payoff to weigh; "
            "see the state reason before acting",
        )
    return Advice(Action.MEASURE_LONGER, None, f"the run did not decide: {ev.verdict_why}")


def _payback_note(advice: Advice, ev: Evidence) -> str:
    """Say which evidence wins when the payback model points elsewhere."""
    pb = ev.payback_action
    if pb is None:
        return ""
    agrees = {
        Action.KEEP: ("keep", "grow"),
        Action.DISABLE_LOADS: ("disable",),
        Action.SKIP_LOADS_BELOW: ("keep", "disable"),
        Action.GROW_TIER: ("grow", "keep"),
        Action.SHRINK_TIER: ("shrink",),
    }.get(advice.action, ())
    if advice.action == Action.MEASURE_LONGER:
        return f"; the payback model alone ({pb}) is not acted on: it models what the measurement did not decide"
    if pb in agrees:
        return ""
    return (
        f"; the payback model says {pb} ({ev.payback_why}), but the measured dTTFT wins: it is measured at this "
        "load, the model assumes a per-token prefill cost and ignores queueing"
    )


def advise(ev: Evidence) -> Advice:
    """The run's one advice."""
    if ev.error is not None:  # named by what to fix, like a misconfigured tier: never measure longer
        return Advice(ev.error_action, None, f"the run could not measure ({ev.error}): {FIXES[ev.error_action]}")
    if ev.config_failure is not None:  # named by the exporter's own reason, with the fix: never measure longer
        return ev.config_failure
    if "tier_smaller_than_prefix" in ev.state_reasons:
        return Advice(
            Action.GROW_TIER,
            None,
            "the CPU tier is smaller than one typical prompt's KV, so it can never store or serve it: grow it "
            "above the prefix (and the GPU pool) or remove it",
        )
    advice = _from_levels(ev.levels) if len(ev.levels) > 1 else _from_headline(ev)
    note = _payback_note(advice, ev)
    return Advice(advice.action, advice.concurrency, advice.why + note) if note else advice


def exit_code(advice: Advice) -> int:
    """The run's exit code: always the advice's (EXIT_CODES), a run that could not measure included."""
    return EXIT_CODES[advice.action]


def level_facts(entries: Sequence[SweepEntry], prefix_tokens: int | None) -> tuple[LevelFact, ...]:
    """The sweep entries at the rounds' prefix length (`load_sweep` rows)."""
    rows = [e for e in entries if prefix_tokens is None or int(e["prefix_tokens"]) == prefix_tokens]
    return tuple(LevelFact(int(e["concurrency"]), str(e["verdict"]), e.get("delta_ttft_seconds")) for e in rows)


__all__ = [
    "CANNOT_MEASURE",
    "EXIT_CODES",
    "FIXES",
    "Action",
    "Advice",
    "AdviceDoc",
    "Evidence",
    "LevelFact",
    "advise",
    "exit_code",
    "level_facts",
]

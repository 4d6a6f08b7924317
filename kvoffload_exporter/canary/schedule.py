"""The serve loop of one engine: a cycle every `interval`; preflight retried with back-off; a budget
that allows no whole cycle waits until enough of the last hour's spending has expired.

Failures are logged once: WARNING when a reason first appears, DEBUG while it repeats, INFO when the
canary recovers (the counts are in kvoffload_canary_errors_total). The loop itself is supervised: if
it ever raises, it is restarted with back-off, counted in kvoffload_canary_restarts_total and shown as
kvoffload_canary_up 0, never left dead and silent.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

from kvoffload_exporter.canary.cycle.records import TARGET, CycleLoad, CycleRecord
from kvoffload_exporter.canary.types import CycleReason, ErrorReason
from kvoffload_exporter.canary.wire.errors import CanaryError
from kvoffload_exporter.canary.wire.secrets import ScrubFilter, scrub
from kvoffload_exporter.ingest.snapshot import Snapshot

if TYPE_CHECKING:  # typing only: the engine imports this module
    from kvoffload_exporter.canary.cycle.engine import CanaryEngine

log = logging.getLogger("kvoffload.canary")
if not any(isinstance(f, ScrubFilter) for f in log.filters):
    log.addFilter(ScrubFilter())  # whatever a canary line quotes, secrets never reach the log


def cycle_load(snap: Snapshot | None, model: str) -> CycleLoad | None:
    """Users' running and waiting requests on `model` in the cycle's closing scrape (summed over its
    engines); None when the scrape carried neither gauge."""
    if snap is None:
        return None
    engines = [e for e in snap.engines if e.model_name == model]
    running = [e.requests_running for e in engines if e.requests_running is not None]
    waiting = [e.requests_waiting for e in engines if e.requests_waiting is not None]
    if not running and not waiting:
        return None
    return CycleLoad(sum(running), sum(waiting))


def _record_load(e: CanaryEngine, rec: CycleRecord, model: str) -> None:
    rec.load = cycle_load(e.scrapes.last(TARGET), model)
    e.state.record_load(rec)


class Said:
    """What was last logged about failures, so that a failure that repeats is not logged every cycle."""

    def __init__(self) -> None:
        self.reason: str | None = None
        self.failures = 0

    def failed(self, label: str, reason: str, what: str) -> None:
        repeat = reason == self.reason
        self.reason, self.failures = reason, self.failures + 1
        level = logging.DEBUG if repeat else logging.WARNING
        log.log(level, "canary %s: %s%s", label, scrub(what), "" if repeat else " (repeats logged at DEBUG)")

    def ok(self, label: str) -> None:
        if self.reason is not None:
            log.info("canary %s: recovered after %d failures (last: %s)", label, self.failures, self.reason)
        self.reason, self.failures = None, 0


async def _prepare_failed(e: CanaryEngine, err: CanaryError, on_cycle: Callable[[], None], said: Said) -> None:
    reason = ErrorReason.of(err.reason)
    said.failed(e.state.label, reason, str(err))
    e.prepared = None
    # A target the canary cannot even prepare for is a failed cycle, not silence.
    e.state.cycles[CycleReason.ERROR] += 1
    e.state.errors[reason] += 1
    e.state.up = False
    e.failing = True
    on_cycle()
    await e.sleep(e.backoff.failure())


def _say_eta(e: CanaryEngine, cost: int) -> None:
    """ "next verdict in ~N min", logged once and again only when the forecast changes (budget.Notices)."""
    s = e.settings
    needed = s.min_samples - len(e.state.samples["offload_hit"])
    done = sum(n for reason, n in e.state.cycles.items() if reason != CycleReason.ERROR)
    # Counted samples a cycle so far (1 until three cycles say otherwise), floored so one bad start cannot
    # push the forecast to infinity.
    per_cycle = max(0.1, e.state.ttft_count["offload_hit"] / done) if done >= 3 else 1.0
    msg = e.notices.verdict_eta(e.clock(), needed, cost, s.budget_tokens_per_hour, s.interval, min(1.0, per_cycle))
    if msg:
        log.info("canary %s: %s", e.state.label, msg)


async def run_forever(e: CanaryEngine, on_cycle: Callable[[], None] = lambda: None, said: Said | None = None) -> None:
    """Cycles every `interval` seconds until cancelled."""
    s = e.settings
    said = said or Said()
    while True:
        started = e.clock()
        try:
            run = e.prepared or await e.prepare()
            rec = await e.run_cycle()
        except CanaryError as err:
            await _prepare_failed(e, err, on_cycle, said)
            continue
        e.failing = rec is not None and rec.reason == CycleReason.ERROR
        if rec is not None:
            _record_load(e, rec, run.conditions.target.model)
        on_cycle()
        _say_eta(e, e.cycle_cost_of(run))
        if rec is None:
            wait = min(s.interval, max(1.0, e.budget.seconds_until(e.cycle_cost_of(run))))
            await e.sleep(wait)
        elif rec.reason == CycleReason.ERROR:
            said.failed(e.state.label, e.last_error or ErrorReason.INTERNAL, f"cycle {rec.cycle} failed: {rec.detail}")
            e.prepared = None  # re-read version, models and cache shape before the next try
            await e.sleep(max(e.backoff.failure(e.retry_after), s.interval / 10))
            e.retry_after = None
        else:
            said.ok(e.state.label)
            await e.sleep(max(0.0, s.interval - (e.clock() - started)))


async def supervise(e: CanaryEngine, on_cycle: Callable[[], None] = lambda: None) -> None:
    """`run_forever`, restarted with back-off whenever it raises (cancellation ends it)."""
    said = Said()
    while True:
        try:
            await run_forever(e, on_cycle, said)
        except Exception as err:  # the canary must never die silently
            e.state.restarts += 1
            e.state.up, e.failing, e.prepared = False, True, None
            log.error("canary %s: its loop failed (%s); restarting it", e.state.label, type(err).__name__)
            log.debug("canary %s: loop failure", e.state.label, exc_info=True)
            try:
                on_cycle()
            except Exception:  # reporting failed too: the restart still happens
                log.debug("canary %s: reporting the restart failed", e.state.label, exc_info=True)
            await e.sleep(e.backoff.failure())

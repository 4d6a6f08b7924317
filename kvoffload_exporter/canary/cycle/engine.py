"""The canary engine: one per target, runs closed-loop probe cycles and keeps their evidence.

A cycle (pressure strategy): seed a unique salted prefix A (cold), revisit it (GPU hit), seed a
second prefix B for the recompute control, displace both from the GPU with filler requests, revisit
A (should come from the offload tier), revisit B with `max_load_tokens: 0` (recompute, where the
server honours it), send A with a fresh salt (cold control) and, when configured, send A to a control
target without the connector. The wait strategy replaces the fillers by growing idle times and lets
real traffic do the evicting, which also measures how long a prefix stays reusable per tier.

Every measured request is followed by a settle delay, a tiny flush request (one more engine step, so
late store statistics get reported) and a second settle delay before `/metrics` is scraped; the
counter deltas around it classify the probe (classify.py). No aiohttp here: HTTP goes through the
client object (client.py), so tests can drive the engine with any transport.

Module map: records/state/errors (data), preflight (prepare), prepared (requests and probes),
steps (shared cycle steps), pressure/wait (the `Cycle` strategies), schedule (the serve loop).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

from kvoffload_exporter.canary.config import CanarySettings
from kvoffload_exporter.canary.cycle import plan as planning
from kvoffload_exporter.canary.cycle import preflight
from kvoffload_exporter.canary.cycle.budget import Backoff, Notices, TokenBudget
from kvoffload_exporter.canary.cycle.context import Progress, Sleep, Transport
from kvoffload_exporter.canary.cycle.cycle import Cycle
from kvoffload_exporter.canary.cycle.prepared import PreparedRun
from kvoffload_exporter.canary.cycle.pressure import PressureCycle
from kvoffload_exporter.canary.cycle.records import (
    CONTROL,
    TARGET,
    Conditions,
    CycleRecord,
    PhaseRecord,
    RequestRecord,
    ServerInfo,
)
from kvoffload_exporter.canary.cycle.scrapes import Scrapes
from kvoffload_exporter.canary.cycle.state import CanaryState
from kvoffload_exporter.canary.cycle.wait import WaitCycle
from kvoffload_exporter.canary.types import CycleReason, ErrorReason, ProbeResult, Strategy
from kvoffload_exporter.canary.wire.errors import BudgetExhausted, CanaryError, CycleFailed

log = logging.getLogger("kvoffload.canary")

CYCLES: dict[Strategy, Cycle] = {c.name: c for c in (PressureCycle(), WaitCycle())}


class CanaryEngine:
    def __init__(
        self,
        url: str,
        settings: CanarySettings,
        client: Transport,
        prompts: planning.Prompts,
        *,
        label: str | None = None,
        control_url: str | None = None,
        clock: Callable[[], float] = time.time,
        sleep: Sleep = asyncio.sleep,
        progress: Progress | None = None,
        keep_records: bool = True,
        max_samples: int | None = None,
    ):
        self.url = url.rstrip("/")
        self.control_url = control_url.rstrip("/") if control_url else None
        self.settings = settings
        self.client = client
        self.prompts = prompts
        self.clock = clock
        self.sleep = sleep
        self.progress: Progress = progress or (lambda kind, obj: None)
        self.keep_records = keep_records
        self.state = CanaryState(label or self.url, settings, max_samples)
        self.budget = TokenBudget(settings.budget_tokens_per_hour, clock)
        self.backoff = Backoff(settings.backoff_initial, settings.backoff_max)
        self.notices = Notices()  # budget and verdict-ETA lines without repeating them every interval
        self.scrapes = Scrapes(client, self.url_of, clock, 2 * settings.settle + 2.0)
        self.prepared: PreparedRun | None = None
        self.requests: list[RequestRecord] = []
        self.cycles: list[CycleRecord] = []
        self.failing = False  # the last preparation or cycle failed (serve loop)
        self._cycle_no = 0
        self._req_no = 0
        self.retry_after: float | None = None  # Retry-After of the last refused request
        self.last_error: ErrorReason | None = None  # why the last cycle failed (None: it did not)
        self.last_failure: CycleFailed | None = None  # the last cycle's failed request (None: none failed)
        self.state.budget_remaining = self.budget.remaining()
        if not settings.recompute_control:
            self.state.recompute_control = "off"

    @property
    def conditions(self) -> Conditions | None:
        """The prepared run's conditions; None before `prepare()` (and after a failure in serve)."""
        return self.prepared.conditions if self.prepared else None

    @property
    def first_snapshot(self) -> dict[str, str]:
        """role → the first raw /metrics text (evidence)."""
        return self.scrapes.first

    def url_of(self, role: str) -> str:
        return self.control_url if role == CONTROL and self.control_url else self.url

    def next_request_no(self) -> int:
        self._req_no += 1
        return self._req_no

    def spend(self, tokens: int) -> None:
        self.budget.spend(tokens)
        self.state.tokens_spent = self.budget.total
        self.state.budget_remaining = self.budget.remaining()

    def record_request(self, rec: RequestRecord) -> None:
        if self.keep_records:
            self.requests.append(rec)
        self.progress("request", rec)

    async def prepare(self) -> PreparedRun:
        """Health, models, version and a metrics snapshot of the target (and control); plan sizes."""
        try:
            self.prepared = PreparedRun(self, await preflight.conditions(self))
        except CanaryError:
            raise
        except Exception as err:  # any answer: a closed reason, never a dead canary
            log.debug("canary %s: preparation failed", self.state.label, exc_info=True)
            raise CanaryError(ErrorReason.INTERNAL, f"preparation failed ({type(err).__name__})") from None
        return self.prepared

    @staticmethod
    def cycle_of(run: PreparedRun) -> Cycle:
        return CYCLES.get(run.strategy, CYCLES[Strategy.WAIT])

    def cycle_cost_of(self, run: PreparedRun) -> int:
        return self.cycle_of(run).cost(run)

    def cycle_cost(self) -> int:
        """Upper estimate of one cycle's tokens; needs `prepare()` first."""
        if self.prepared is None:
            raise RuntimeError("cycle_cost() before prepare()")
        return self.cycle_cost_of(self.prepared)

    async def run_cycle(self) -> CycleRecord | None:
        """One cycle (prepares first if needed). None when the budget does not allow a whole cycle now."""
        run = self.prepared or await self.prepare()
        cycle = self.cycle_of(run)
        cost = cycle.cost(run)
        if not self.budget.can_spend(cost):
            self.state.budget_remaining = self.budget.remaining()
            log.log(
                self.notices.budget_level(),
                "canary %s: budget allows no full cycle (%d tokens) now",
                self.state.label,
                cost,
            )
            return None
        self._cycle_no += 1
        c = self._cycle_no
        started = self.clock()
        rec = CycleRecord(c, run.strategy, started, started, ProbeResult.ERROR, CycleReason.ERROR, detail="")
        self.progress("cycle_start", c)
        self.last_error, self.last_failure = None, None
        try:
            await cycle.run(run, c, rec)
            self.backoff.success()
        except CycleFailed as e:
            rec.result, rec.reason, rec.detail = ProbeResult.ERROR, CycleReason.ERROR, e.detail
            self.state.probes[ProbeResult.ERROR] += 1
            self.last_error, self.last_failure = e.reason, e
            self.retry_after = e.retry_after
        except BudgetExhausted as e:
            rec.result, rec.reason, rec.detail = ProbeResult.ERROR, CycleReason.ERROR, str(e)
            self.last_error = ErrorReason.BUDGET
        except Exception as e:  # a bug or an answer nothing foresaw: this cycle fails
            log.debug("canary %s cycle %d failed", self.state.label, c, exc_info=True)
            detail = f"{ErrorReason.INTERNAL} {type(e).__name__}"
            rec.result, rec.reason, rec.detail = ProbeResult.ERROR, CycleReason.ERROR, detail
            self.last_error = ErrorReason.INTERNAL
        if self.last_error is not None:
            self.state.errors[self.last_error] += 1
        self._finish(rec)
        return rec

    def _finish(self, rec: CycleRecord) -> None:
        rec.finished = self.clock()
        self.state.up = rec.reason != CycleReason.ERROR
        if rec.reason != CycleReason.ERROR:
            self.state.last_success = rec.finished
        self.state.cycles[rec.reason] += 1
        self.cycles.append(rec)
        if not self.keep_records:  # serve runs for months: keep the last few cycles only
            del self.cycles[:-20]
        self.state.recompute()
        self.progress("cycle", rec)


__all__ = [
    "CONTROL",
    "CYCLES",
    "TARGET",
    "BudgetExhausted",
    "CanaryEngine",
    "CanaryError",
    "CanaryState",
    "Conditions",
    "CycleFailed",
    "CycleRecord",
    "PhaseRecord",
    "RequestRecord",
    "ServerInfo",
    "Transport",
]

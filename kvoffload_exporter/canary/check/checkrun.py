"""`check`'s procedure: keys, preflight, N canary rounds, the closing scrapes; returns a CheckResult.

No aiohttp and no flags here: commands/check.py parses the flags into a CheckRequest and hands in a
transport (client.open_client); checkreport.py turns the result into the verdict document and
evidence.py writes the files. Output goes to the given stream only (progress, never the secret).
"""

from __future__ import annotations

import asyncio
import secrets
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import TextIO

from kvoffload_exporter.canary.check import diagnose, retries, sweep
from kvoffload_exporter.canary.check.advice import Action
from kvoffload_exporter.canary.check.progress import PREFIX, Progress, announced, eta_text, redact
from kvoffload_exporter.canary.check.sweepreport import Level
from kvoffload_exporter.canary.config import CanarySettings
from kvoffload_exporter.canary.cycle.context import Sleep, Transport
from kvoffload_exporter.canary.cycle.engine import CanaryEngine
from kvoffload_exporter.canary.cycle.plan import Prompts
from kvoffload_exporter.canary.cycle.records import CONTROL
from kvoffload_exporter.canary.cycle.sequential import Design
from kvoffload_exporter.canary.cycle.stats import CONTROL_ORDER
from kvoffload_exporter.canary.cycle.wait import wait_notice
from kvoffload_exporter.canary.types import CycleReason
from kvoffload_exporter.canary.wire.errors import CanaryError, CycleFailed
from kvoffload_exporter.canary.wire.protocol import MetricsError
from kvoffload_exporter.canary.wire.secrets import ApiKey, SecretError, load_api_key, load_or_create_secret
from kvoffload_exporter.ingest.exposition import ParseError
from kvoffload_exporter.ingest.normalise import normalise


@dataclass(frozen=True)
class CheckRequest:
    """What one check run needs, from the flags."""

    target: str
    rounds: int
    settings: CanarySettings
    quiet: bool = False
    sweep: sweep.SweepRequest | None = None  # `--concurrency`: the load sweep after the rounds
    allow_no_offload: bool = False  # measure a target whose preflight found no offload metrics
    retry_deadline: float = retries.DEFAULT_DEADLINE  # seconds a streak of failed rounds is retried


@dataclass(frozen=True)
class Keys:
    api_key: ApiKey | None
    secret: bytes = field(repr=False)


@dataclass
class CheckResult:
    """Everything the report and the evidence are built from."""

    request: CheckRequest
    engine: CanaryEngine
    prompts: Prompts
    started: float
    finished: float
    error: str | None = None  # why there is no verdict (preflight failed, every round failed)
    error_action: Action = Action.FIX_TARGET  # what fixes `error`: the advice of a run that could not measure
    after: dict[str, str] = field(default_factory=dict)  # role → closing /metrics text
    sweep: list[Level] = field(default_factory=list)
    config_failure: diagnose.Failure | None = None  # the rounds stopped on a misconfigured tier
    interrupted: bool = False  # Ctrl-C: the document holds what was measured until then

    @property
    def ran(self) -> bool:
        """At least one canary round was attempted (preflight passed)."""
        return bool(self.engine.cycles)

    def phases(self) -> list[dict[str, object]]:
        return [asdict(p) for c in self.engine.cycles for p in c.phases]

    def cycles(self) -> list[dict[str, object]]:
        return [{k: v for k, v in asdict(c).items() if k != "phases"} for c in self.engine.cycles]


def load_keys(settings: CanarySettings, stderr: TextIO) -> Keys:
    """The API key and the salt secret; raises ConfigError/SecretError for the caller to report."""
    api_key = load_api_key(settings.api_key_file, settings.api_key_env)
    try:
        secret = load_or_create_secret(settings.secret_file)
    except SecretError as e:
        if settings.secret_file:
            raise
        # A one-off check on a read-only home still works; its salt just differs from serve's.
        print(f"{PREFIX}: {e}; using a one-off salt secret", file=stderr)
        secret = secrets.token_hex(32).encode()
    return Keys(api_key, secret)


def design_of(req: CheckRequest) -> Design:
    """The rounds' sequential design (sequential.py): the run's (in a sweep, the level's) error over the looks."""
    return Design.for_rounds(req.rounds, req.settings.min_samples, 1.0 - req.settings.confidence)


def _counted(engine: CanaryEngine) -> int:
    """Counted samples the verdict still waits for: the fewer of the offload path and the best control."""
    s = engine.state.samples
    controls = [len(s[p]) for p in CONTROL_ORDER if p in s]
    return min(len(s["offload_hit"]), max(controls, default=0))


def _failed(engine: CanaryEngine, streak: retries.Streak, stderr: TextIO | None) -> float | None:
    """Book a failed round; the seconds to wait before the next one, None when the run ends (a refusal
    confirmed, or the deadline). Says what it waits for and until when (never an ETA of seconds)."""
    rec, fail = engine.cycles[-1], engine.last_failure
    streak.failed(fail.status if fail else None, rec.finished - rec.started)
    if streak.refused() is not None:
        return None
    wait = streak.wait(engine.backoff.failure(engine.retry_after))
    if wait is not None and stderr is not None:
        what = f"HTTP {fail.status}" if _http(fail) and fail else (str(fail.reason) if fail else "error")
        until = time.strftime("%H:%M:%S", time.gmtime(time.time() + streak.left()))
        why = "once more at once, to confirm a refusal" if wait == 0 else f"in {wait:.0f} s"
        print(
            f"{PREFIX}: round {rec.cycle} failed ({what}); retrying {why}; if every round keeps failing the run "
            f"ends by {until} UTC (retry deadline {streak.deadline:.0f} s)",
            file=stderr,
            flush=True,
        )
    return wait


def _http(fail: CycleFailed | None) -> bool:
    """The round failed on an HTTP error status (not on a stream, a timeout or a connection)."""
    return fail is not None and fail.status is not None and fail.status >= 400


def _failure_text(engine: CanaryEngine, streak: retries.Streak) -> str:
    fail = engine.last_failure
    status = streak.refused()
    server = "control target" if fail is not None and fail.role == CONTROL else "target"
    if status is not None and fail is not None:
        return retries.refused_text(status, fail.said, server)
    if fail is not None and _http(fail):
        last = f"HTTP {fail.status}: {retries.server_message(fail.said)}"
    else:
        last = engine.cycles[-1].detail
    return retries.gave_up_text(streak, last, server)


async def _rounds(
    engine: CanaryEngine, req: CheckRequest, stderr: TextIO, sleep: Sleep, stop: Callable[[], bool]
) -> str | None:
    """Rounds until the sequential verdict decides or `--rounds` samples a path are counted (the last look;
    within the budget), unless `stop()` says otherwise after a completed round or an output mismatch is
    confirmed. A failed round is retried (retries.py) until a refusal is
    confirmed or the failing streak reaches the deadline: then the error; also when no round completed."""
    design = engine.state.design or design_of(req)
    need = design.last
    cap = 3 * need  # rounds that count nothing are repeated, up to 3 × the last look
    done = errors = 0
    streak = retries.Streak(req.retry_deadline)
    while _counted(engine) < need and done < cap and errors <= cap:
        if done >= req.rounds and engine.state.offload_hits_seen == 0:
            break  # past --rounds, only a tier that does serve revisits earns more rounds
        rec = await engine.run_cycle()
        if rec is None:
            print(f"{PREFIX}: token budget exhausted after {done} rounds", file=stderr)
            break
        if rec.reason == CycleReason.ERROR:
            errors += 1
            # The plan is kept: a failed request does not change the server's shape.
            wait = _failed(engine, streak, None if req.quiet else stderr)
            if wait is None:
                return _failure_text(engine, streak)
            await sleep(wait)
            streak.waited(wait)
            continue
        streak.success()
        done += 1
        if stop():
            break
        if engine.state.mismatch_confirmed:
            print(f"{PREFIX}: output mismatch confirmed after {done} rounds: stopping", file=stderr, flush=True)
            break
        if engine.state.decided:  # the sequential look decided: the rounds left are not needed
            break
    if done == 0 and errors:
        return f"every round failed ({errors}); last: {engine.cycles[-1].detail}"
    return None


def _misconfigured(result: CheckResult, stderr: TextIO) -> bool:
    """After a completed round: has the tier shown a configuration failure (diagnose.py)? Then it is kept in
    the result, said on stderr, and the rounds stop."""
    e, run_ = result.engine, result.engine.prepared
    if run_ is None:
        return False
    first = e.first_snapshot.get("target")
    try:
        before = normalise(first) if first is not None else None
    except ParseError:
        before = None
    failure = diagnose.config_failure(
        before,
        e.scrapes.last("target"),
        run_.target.model,
        e.cycles,
        e.state.reason_facts(),
        e.state.offload_hits_seen,
        run_.sizing.prefix_tokens,
        e.state.bytes_per_token,
    )
    if failure is None:
        return False
    result.config_failure = failure
    print(f"{PREFIX}: stopping after {failure.revisits} rounds: {redact(failure.why)}", file=stderr, flush=True)
    return True


def rounds_level(engine: CanaryEngine, control: str, prefix_tokens: int) -> Level:
    """The ordinary rounds as the sweep's c = 1 level: each counted probe a burst of one, against the
    headline verdict's control, so the c = 1 row and the verdict come from the same samples."""
    lv = Level(1, prefix_tokens, control, source="rounds", attempts=engine.state.offload_attempts)
    lv.design = engine.state.design
    lv.rounds = sum(1 for c in engine.cycles if c.reason != CycleReason.ERROR)
    for c in engine.cycles:
        for ph in c.phases:
            if not ph.counted or ph.ttft_seconds is None:
                continue
            if ph.path == "offload_hit":
                lv.offload_bursts.append([ph.ttft_seconds])
                lv.offload_cycles.append(ph.cycle)
            elif ph.path == control:
                lv.control_bursts.append([ph.ttft_seconds])
                lv.control_cycles.append(ph.cycle)
    lv.hit_bursts = len(lv.offload_bursts)
    return lv


async def _closing_scrapes(engine: CanaryEngine, client: Transport, stderr: TextIO) -> dict[str, str]:
    after: dict[str, str] = {}
    for role, url in (("target", engine.url), ("control", engine.control_url)):
        if url:
            try:
                after[role] = await client.metrics(url)
            except MetricsError as e:  # the verdict stands without the closing snapshot
                print(f"{PREFIX}: final /metrics of {url} failed: {e}", file=stderr)
    return after


async def run(
    req: CheckRequest, client: Transport, keys: Keys, *, stderr: TextIO, sleep: Sleep = asyncio.sleep
) -> CheckResult:
    """Preflight, the rounds and the closing scrapes; failures end up in `result.error`, not raised."""
    s = req.settings
    prompts = Prompts(keys.secret, secrets.token_hex(4), s.id_range)
    progress = Progress(stderr, req.rounds, req.quiet, design_of(req).last)
    raw_sleep = sleep  # the retry waits say what they wait for themselves (_failed)
    if not req.quiet:
        sleep = announced(sleep, stderr, "the canary's next step (a wait-strategy idle time, a load-sweep retry)")
    engine = CanaryEngine(
        req.target,
        s,
        client,
        prompts,
        control_url=s.control_target,
        progress=progress,
        max_samples=s.max_samples,
        sleep=sleep,
    )
    engine.state.design = design_of(req)
    progress.counted = lambda: _counted(engine)
    result = CheckResult(req, engine, prompts, started=time.time(), finished=0.0)
    try:
        run_ = await engine.prepare()
    except CanaryError as e:
        result.error = redact(f"preflight failed ({e.reason}): {e.detail}")
        result.error_action = Action.FIX_CONTROL if e.role == CONTROL else Action.FIX_TARGET
    else:
        snap = engine.scrapes.last("target")
        if snap is not None and not snap.offload_configured and not req.allow_no_offload:
            result.error = redact(
                f"no offload connector: preflight found no offload metrics on {run_.target.url} "
                "(`--allow-no-offload` measures anyway)"
            )
            result.error_action = Action.CONFIGURE_OFFLOAD
            result.finished = time.time()
            return result
        if not req.quiet:
            t, sz = run_.target, run_.sizing
            print(
                f"target {redact(t.url)}: vLLM {t.version or '?'}, model {t.model}, offload metrics {t.generation}; "
                f"strategy {run_.strategy}, prompt {sz.prefix_tokens}+{sz.tail_tokens} tokens; "
                f"~{engine.cycle_cost():,} tokens per round",
                file=stderr,
            )
            if run_.strategy == "wait":  # the obvious first run, on an idle server: say what it will wait for
                print(f"{PREFIX}: {wait_notice(s)}", file=stderr)
        try:
            result.error = await _rounds(engine, req, stderr, raw_sleep, lambda: _misconfigured(result, stderr))
            ok = result.error is None and result.config_failure is None and not engine.state.mismatch_confirmed
            if ok and req.sweep is not None:
                verdict = engine.state.verdict
                control = verdict.control if verdict and verdict.control else sweep.control_of(run_)
                c1 = rounds_level(engine, control, run_.sizing.prefix_tokens)
                result.sweep = await sweep.run(run_, req.sweep, None if req.quiet else stderr, c1, eta_text)
        except asyncio.CancelledError:  # Ctrl-C: keep what was measured (the caller writes it, marked)
            result.interrupted = True
            print(f"{PREFIX}: interrupted: writing what was measured so far", file=stderr, flush=True)
            return _finish(result)
        result.error = redact(result.error) if result.error else None
        if result.error is not None:  # every round failed: on the server of the last failed request
            fail = engine.last_failure
            result.error_action = Action.FIX_CONTROL if fail is not None and fail.role == CONTROL else Action.FIX_TARGET
        result.after = await _closing_scrapes(engine, client, stderr)
    return _finish(result)


def _finish(result: CheckResult) -> CheckResult:
    result.finished = time.time()
    return result


__all__ = ["CheckRequest", "CheckResult", "Keys", "Progress", "load_keys", "run"]

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
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter, deque
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol

from exporter.canary import plan as planning
from exporter.canary.budget import Backoff, TokenBudget
from exporter.canary.classify import Classification, Deltas, classify, revisit_reason
from exporter.canary.config import CanarySettings
from exporter.canary.protocol import MetricsError, parse_models
from exporter.canary.stats import CONTROL_ORDER, Verdict, decide, median
from exporter.catalogue import CANARY_PATHS
from exporter.exposition import ParseError
from exporter.model import Snapshot
from exporter.normalise import normalise

log = logging.getLogger("kvoffload.canary")

TARGET, CONTROL = "target", "control"


class Transport(Protocol):
    """What the engine needs from the HTTP client (client.CanaryClient implements it)."""

    async def complete(self, base_url: str, body: dict[str, Any]) -> Any: ...
    async def get(self, base_url: str, path: str) -> tuple[int | None, Any]: ...
    async def metrics(self, base_url: str) -> str: ...
    async def version(self, base_url: str) -> str | None: ...


class CanaryError(Exception):
    """The canary cannot run against this target (preflight) — `reason` is a short closed word."""

    def __init__(self, reason: str, detail: str):
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail


class CycleFailed(Exception):
    def __init__(self, detail: str, retry_after: float | None = None):
        super().__init__(detail)
        self.detail = detail
        self.retry_after = retry_after


class BudgetExhausted(Exception):
    def __init__(self, wait: float):
        super().__init__(f"token budget exhausted for {wait:.0f}s")
        self.wait = wait


@dataclass
class ServerInfo:
    url: str
    version: str | None
    model: str
    max_model_len: int | None
    generation: str
    cache_config: dict[str, str]
    offload_config: dict[str, str]


@dataclass
class Conditions:
    target: ServerInfo
    control: ServerInfo | None
    facts: planning.CacheFacts
    sizing: planning.Sizing
    strategy: str
    salt_fingerprint: str

    def as_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["sizing"] = self.sizing.as_dict()
        d["gpu_cache_tokens"] = self.facts.gpu_cache_tokens
        return d


@dataclass
class RequestRecord:
    t: float
    cycle: int
    phase: str
    kind: str  # probe | filler | flush
    role: str  # target | control
    prompt_tokens: int
    salt: str  # family | fresh (the salt itself never leaves the process)
    kv_transfer_params: dict[str, Any] | None
    status: int | None
    error: str | None
    detail: str
    ttft_first_event_seconds: float | None
    ttft_seconds: float | None
    total_seconds: float | None
    cached_tokens: int | None
    usage: dict[str, Any] | None
    server_metrics: dict[str, Any] | None


@dataclass
class PhaseRecord:
    cycle: int
    phase: str
    role: str
    expect: str
    path: str
    counted: bool  # entered the TTFT statistics of `path`
    classification: str | None  # None for the displacement phase
    ttft_seconds: float | None
    ttft_first_event_seconds: float | None
    cached_tokens: int | None
    load_bytes: float
    store_bytes: float
    gpu_hit_tokens: float
    external_hit_tokens: float
    other_traffic_tokens: float
    ambiguous: bool = False
    idle_seconds: float | None = None
    note: str = ""


@dataclass
class CycleRecord:
    cycle: int
    strategy: str
    started: float
    finished: float
    result: str  # the displaced revisit's classification, or error
    reason: str  # catalogue.CANARY_REASONS
    detail: str
    phases: list[PhaseRecord] = field(default_factory=list)


class CanaryState:
    """Everything exported and reported about one target's canary; updated after every cycle."""

    def __init__(self, label: str, settings: CanarySettings, max_samples: int | None = None):
        self.label = label
        self.settings = settings
        maxlen = max_samples if max_samples is not None else settings.max_samples
        self.samples: dict[str, deque[float]] = {p: deque(maxlen=maxlen) for p in CANARY_PATHS}
        self.probes: Counter[str] = Counter()
        self.cycles: Counter[str] = Counter()
        self.offload_attempts = 0
        self.offload_hits_seen = 0
        self.last_success: float | None = None
        self.verdict: Verdict | None = None
        self.residency: dict[str, float] = {}  # tier → longest idle seconds still a hit (wait strategy)
        self.recompute_control = "unknown"  # unknown | honoured | ignored | no_connector | off
        self.bytes_per_token: float | None = None
        self._bpt_candidates: list[float] = []
        self.tokens_spent = 0
        self.budget_remaining: float | None = None

    def learn_bytes_per_token(self, store_bytes: float, own_tokens: int, other_tokens: float) -> None:
        """Stored bytes over every prompt token that could have caused them: exact in a quiet window,
        a lower bound under traffic (never above the truth, so a real full load always "covers" the
        prefix; whether the hit was full at all comes from the request's own cached_tokens)."""
        self._bpt_candidates.append(store_bytes / (own_tokens + other_tokens))
        self.bytes_per_token = median(self._bpt_candidates[-25:])  # robust to one late-reported store

    def recompute(self) -> Verdict:
        s = self.settings
        self.verdict = decide(
            {k: list(v) for k, v in self.samples.items()},
            self.offload_attempts,
            min_samples=s.min_samples,
            seed=s.seed,
            n_boot=s.bootstrap,
            confidence=s.confidence,
        )
        return self.verdict


Sleep = Callable[[float], Awaitable[None]]
Progress = Callable[[str, Any], None]


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
        self.progress = progress or (lambda kind, obj: None)
        self.keep_records = keep_records
        self.state = CanaryState(label or self.url, settings, max_samples)
        self.budget = TokenBudget(settings.budget_tokens_per_hour, clock)
        self.backoff = Backoff(settings.backoff_initial, settings.backoff_max)
        self.conditions: Conditions | None = None
        self.requests: list[RequestRecord] = []
        self.cycles: list[CycleRecord] = []
        self.failing = False  # the last preparation or cycle failed (serve loop)
        self.first_snapshot: dict[str, str] = {}  # role → raw /metrics text (evidence)
        self._snap: dict[str, tuple[float, Snapshot]] = {}
        self._cycle_no = 0
        self._req_no = 0
        self.retry_after: float | None = None  # Retry-After of the last refused request
        self.state.budget_remaining = self.budget.remaining()
        if not settings.recompute_control:
            self.state.recompute_control = "off"

    # ---- preflight ---------------------------------------------------------------------------
    def _url(self, role: str) -> str:
        return self.control_url if role == CONTROL and self.control_url else self.url

    async def _server_info(self, role: str) -> ServerInfo:
        url = self._url(role)
        status, body = await self.client.get(url, "/health")
        if status != 200:
            raise CanaryError("health", f"{url}/health answered {status if status is not None else body}")
        status, body = await self.client.get(url, "/v1/models")
        if status == 401:
            raise CanaryError(
                "auth", f"{url}/v1/models needs an API key (--api-key-file or ${self.settings.api_key_env})"
            )
        models = parse_models(body) if status == 200 else None
        if not models or not models.ids:
            raise CanaryError("models", f"{url}/v1/models answered {status} without models")
        model = self.settings.model if self.settings.model in models.ids else models.ids[0]
        if self.settings.model and self.settings.model not in models.ids and role == TARGET:
            raise CanaryError("models", f"model {self.settings.model!r} not served by {url} ({models.ids})")
        version = await self.client.version(url)
        try:
            snap = await self._scrape(role, keep_first=True)
        except CycleFailed as e:
            raise CanaryError("metrics", e.detail) from None
        eng = next((e for e in snap.engines if e.model_name == model), snap.engines[0] if snap.engines else None)
        return ServerInfo(
            url=url,
            version=version,
            model=model,
            max_model_len=models.max_model_len.get(model),
            generation=snap.generation,
            cache_config=dict(eng.cache_config) if eng else {},
            offload_config=dict(eng.offload_config) if eng else {},
        )

    async def prepare(self) -> Conditions:
        """Health, models, version and a metrics snapshot of the target (and control); plan sizes."""
        target = await self._server_info(TARGET)
        control = await self._server_info(CONTROL) if self.control_url else None
        snap = self._snap[TARGET][1]
        eng = next((e for e in snap.engines if e.model_name == target.model), None)
        facts = planning.CacheFacts.from_engine(eng, target.max_model_len, snap.offload_configured)
        s = self.settings
        strategy = s.effective_strategy
        # Pressure seeds B after A's GPU revisit, so only one prefix must fit; the wait strategy keeps
        # A and B resident together until traffic evicts them.
        resident = 2 if strategy == "wait" and self._use_recompute() else 1
        try:
            sizing = planning.size(facts, s.prefix_tokens, s.chunk_tokens, s.filler_tokens, resident=resident)
        except planning.PlanError as e:
            raise CanaryError("plan", str(e)) from None
        if strategy == "pressure" and not sizing.filler_count:
            raise CanaryError("plan", "pressure needs num_gpu_blocks and block_size from vllm:cache_config_info")
        if control and control.max_model_len and control.max_model_len <= sizing.prompt_tokens:
            raise CanaryError("plan", f"control target max_model_len {control.max_model_len} is too short")
        self.conditions = Conditions(target, control, facts, sizing, strategy, self.prompts.fingerprint)
        return self.conditions

    # ---- I/O helpers --------------------------------------------------------------------------
    async def _scrape(self, role: str, keep_first: bool = False) -> Snapshot:
        url = self._url(role)
        try:
            text = await self.client.metrics(url)
            snap = normalise(text)
        except ParseError as e:
            raise CycleFailed(f"{url}/metrics unreadable: {e}") from None
        except MetricsError as e:  # without counters around it a probe cannot be classified
            raise CycleFailed(f"{url}/metrics: {e}") from None
        if not snap.families:
            raise CycleFailed(f"{url}/metrics has no vllm: families")
        if keep_first and role not in self.first_snapshot:
            self.first_snapshot[role] = text
        self._snap[role] = (self.clock(), snap)
        return snap

    async def _before(self, role: str) -> Snapshot:
        """The previous phase's after-scrape when it is fresh, else a new scrape (tight windows)."""
        cached = self._snap.get(role)
        if cached is not None and self.clock() - cached[0] <= 2 * self.settings.settle + 2.0:
            return cached[1]
        return await self._scrape(role)

    def _body(self, prompt: list[int], salt: str, kv: dict[str, Any] | None) -> dict[str, Any]:
        assert self.conditions is not None
        body: dict[str, Any] = {
            "model": self.conditions.target.model,
            "prompt": prompt,
            "max_tokens": 1,
            "temperature": 0,
            "ignore_eos": True,
            "stream": True,
            "stream_options": {"include_usage": True},
            "return_token_ids": True,
            "cache_salt": salt,
            "request_id": f"kvoffload-canary-{self.prompts.nonce}-{self._req_no}",
        }
        if kv is not None:
            body["kv_transfer_params"] = kv
        return body

    async def _send(
        self,
        cycle: int,
        phase: str,
        kind: str,
        role: str,
        prompt: list[int],
        salt: str | None,
        kv: dict[str, Any] | None = None,
    ) -> Any:
        if not self.budget.can_spend(len(prompt) + 1):
            raise BudgetExhausted(self.budget.seconds_until(len(prompt) + 1))
        self._req_no += 1
        fresh = salt is None
        body = self._body(prompt, salt if salt is not None else self.prompts.fresh_salt(kind), kv)
        if role == CONTROL and self.conditions and self.conditions.control:
            body["model"] = self.conditions.control.model
        comp = await self.client.complete(self._url(role), body)
        spent = comp.tokens_spent or (len(prompt) + 1 if comp.status == 200 else 0)
        self.budget.spend(spent)
        self.state.tokens_spent = self.budget.total
        self.state.budget_remaining = self.budget.remaining()
        rec = RequestRecord(
            t=self.clock(),
            cycle=cycle,
            phase=phase,
            kind=kind,
            role=role,
            prompt_tokens=len(prompt),
            salt="fresh" if fresh else "family",
            kv_transfer_params=kv,
            status=comp.status,
            error=comp.error,
            detail=comp.detail,
            ttft_first_event_seconds=comp.ttft_event,
            ttft_seconds=comp.ttft_token,
            total_seconds=comp.total,
            cached_tokens=comp.cached_tokens,
            usage=comp.usage,
            server_metrics=comp.server_metrics,
        )
        if self.keep_records:
            self.requests.append(rec)
        self.progress("request", rec)
        if comp.error is not None:
            raise CycleFailed(f"{phase} {kind} on {role}: {comp.error} {comp.detail}".strip(), comp.retry_after)
        return comp

    async def _flush(self, cycle: int, phase: str, role: str) -> int:
        """Settle, one tiny request (an engine step that reports finished stores), settle."""
        s = self.settings
        if not s.flush:
            await self.sleep(s.settle)
            return 0
        assert self.conditions is not None
        await self.sleep(s.settle)
        n = self.conditions.sizing.flush_tokens
        await self._send(cycle, phase, "flush", role, self.prompts.fresh(n, "flush"), None)
        await self.sleep(s.settle)
        return n

    async def _probe(
        self,
        cycle: int,
        phase: str,
        prompt: list[int],
        *,
        expect: str,
        path: str,
        role: str = TARGET,
        fresh_salt: bool = False,
        kv: dict[str, Any] | None = None,
        idle: float | None = None,
    ) -> tuple[PhaseRecord, Classification, Any]:
        assert self.conditions is not None
        sz = self.conditions.sizing
        before = await self._before(role)
        comp = await self._send(cycle, phase, "probe", role, prompt, None if fresh_salt else self.prompts.salt, kv)
        own = len(prompt) + await self._flush(cycle, phase, role)
        after = await self._scrape(role)
        info = self.conditions.control if role == CONTROL and self.conditions.control else self.conditions.target
        model = info.model
        d = Deltas.between(before, after, model)
        cls = classify(sz.prefix_tokens, comp.cached_tokens, d, own, self.state.bytes_per_token, sz.tolerance, expect)
        rec = PhaseRecord(
            cycle=cycle,
            phase=phase,
            role=role,
            expect=expect,
            path=path,
            counted=False,
            classification=cls.result,
            ttft_seconds=comp.ttft_token,
            ttft_first_event_seconds=comp.ttft_event,
            cached_tokens=comp.cached_tokens,
            load_bytes=d.load_bytes,
            store_bytes=d.store_bytes,
            gpu_hit_tokens=d.gpu_hits,
            external_hit_tokens=d.ext_hits,
            other_traffic_tokens=cls.others_tokens,
            ambiguous=cls.ambiguous,
            idle_seconds=idle,
            note=cls.note,
        )
        self.progress("phase", rec)
        return rec, cls, comp

    async def _displace(self, cycle: int) -> PhaseRecord:
        """Filler prompts, each with its own fresh salt, totalling more than the GPU cache."""
        assert self.conditions is not None
        sz = self.conditions.sizing
        before = await self._before(TARGET)
        own = 0
        for _ in range(sz.filler_count):
            prompt = self.prompts.fresh(sz.filler_tokens, "filler")
            await self._send(cycle, "displace", "filler", TARGET, prompt, None)
            own += len(prompt)
        own += await self._flush(cycle, "displace", TARGET)
        after = await self._scrape(TARGET)
        d = Deltas.between(before, after, self.conditions.target.model)
        rec = PhaseRecord(
            cycle=cycle,
            phase="displace",
            role=TARGET,
            expect="miss",
            path="displace",
            counted=False,
            classification=None,
            ttft_seconds=None,
            ttft_first_event_seconds=None,
            cached_tokens=None,
            load_bytes=d.load_bytes,
            store_bytes=d.store_bytes,
            gpu_hit_tokens=d.gpu_hits,
            external_hit_tokens=d.ext_hits,
            other_traffic_tokens=d.others(own),
        )
        self.progress("phase", rec)
        return rec

    # ---- cycles --------------------------------------------------------------------------------
    def cycle_cost(self) -> int:
        """Upper estimate of one cycle's tokens (checked against the budget before starting)."""
        assert self.conditions is not None
        sz = self.conditions.sizing
        p = sz.prompt_tokens + 1
        flush = sz.flush_tokens + 1
        probes = 5 + (1 if self._use_recompute() else 0) + (1 if self.control_url else 0)  # seeds, revisits, cold
        if self.conditions.strategy == "pressure":
            fill = sz.filler_count * (sz.filler_tokens + 1) + flush
        else:
            fill = 0
            probes += max(0, int(self._wait_steps()) - 1)
        return probes * (p + flush) + fill

    def _wait_steps(self) -> int:
        s, n, idle = self.settings, 1, self.settings.wait_initial
        while idle * 2 <= s.wait_max:
            idle *= 2
            n += 1
        return n

    def _use_recompute(self) -> bool:
        return self.settings.recompute_control and self.state.recompute_control not in ("ignored", "off")

    async def run_cycle(self) -> CycleRecord | None:
        """One cycle. Returns None when the budget does not allow a whole cycle now."""
        if self.conditions is None:
            await self.prepare()
        cost = self.cycle_cost()
        if not self.budget.can_spend(cost):
            self.state.budget_remaining = self.budget.remaining()
            log.info("canary %s: budget allows no full cycle (%d tokens) now", self.state.label, cost)
            return None
        self._cycle_no += 1
        c = self._cycle_no
        started = self.clock()
        rec = CycleRecord(
            cycle=c,
            strategy=self.conditions.strategy if self.conditions else "?",
            started=started,
            finished=started,
            result="error",
            reason="error",
            detail="",
        )
        self.progress("cycle_start", c)
        try:
            if rec.strategy == "pressure":
                await self._cycle_pressure(c, rec)
            else:
                await self._cycle_wait(c, rec)
            self.backoff.success()
        except CycleFailed as e:
            rec.result, rec.reason, rec.detail = "error", "error", e.detail
            self.state.probes["error"] += 1
            self.retry_after = e.retry_after
        except BudgetExhausted as e:
            rec.result, rec.reason, rec.detail = "error", "error", str(e)
        rec.finished = self.clock()
        if rec.reason != "error":
            self.state.last_success = rec.finished
        self.state.cycles[rec.reason] += 1
        self.cycles.append(rec)
        if not self.keep_records:  # serve runs for months: keep the last few cycles only
            del self.cycles[:-20]
        self.state.recompute()
        self.progress("cycle", rec)
        return rec

    def _count(self, rec: PhaseRecord, cls: Classification, wanted: str) -> None:
        """Put a probe's TTFT into the statistics of `rec.path` when its classification is `wanted`."""
        if rec.ttft_seconds is None or cls.ambiguous or cls.result != wanted:
            return
        self.state.samples[rec.path].append(rec.ttft_seconds)
        rec.counted = True

    def _probe_done(self, rec: PhaseRecord) -> None:
        if rec.phase not in ("seed", "seed_b") and rec.classification:
            self.state.probes[rec.classification] += 1

    async def _seed(self, c: int, rec: CycleRecord, prompt: list[int], phase: str) -> PhaseRecord:
        ph, cls, _ = await self._probe(c, phase, prompt, expect="miss", path="cold")
        self._count(ph, cls, "miss")
        rec.phases.append(ph)
        return ph

    def _learn(self, phases: list[PhaseRecord], seeds: int) -> None:
        assert self.conditions is not None
        stored = sum(p.store_bytes for p in phases)
        if stored > 0 and seeds:
            self.state.learn_bytes_per_token(
                stored, seeds * self.conditions.sizing.prefix_tokens, sum(p.other_traffic_tokens for p in phases)
            )

    async def _controls(
        self, c: int, rec: CycleRecord, a: list[int], b: list[int] | None, idle: float | None = None
    ) -> dict[str, float]:
        """Recompute (B with max_load_tokens 0), cold (fresh salt) and control-target probes."""
        sz = self.conditions.sizing if self.conditions else None
        assert sz is not None
        got: dict[str, float] = {}
        if b is not None:
            ph, cls, _ = await self._probe(
                c,
                "recompute",
                b + self.prompts.tail(sz),
                expect="miss",
                path="recompute",
                kv={"max_load_tokens": 0},
                idle=idle,
            )
            # Never trust the request: the counters say whether the server honoured the key.
            if cls.result == "offload_hit" or (cls.result == "partial" and ph.load_bytes > 0):
                self.state.recompute_control = "ignored"
                ph.note = (ph.note + "; " if ph.note else "") + "max_load_tokens ignored by the server (loaded anyway)"
                self.state.offload_hits_seen += 1
            elif cls.result == "miss" and ph.load_bytes == 0:
                # Without offload families no load was possible: that proves nothing about the key.
                target = self.conditions.target if self.conditions else None
                configured = target is not None and target.generation != "none"
                self.state.recompute_control = "honoured" if configured else "no_connector"
                self._count(ph, cls, "miss")
            self._probe_done(ph)
            rec.phases.append(ph)
            if ph.counted and ph.path == "recompute" and ph.ttft_seconds is not None:
                got["recompute"] = ph.ttft_seconds
        ph, cls, _ = await self._probe(
            c, "cold", a + self.prompts.tail(sz), expect="miss", path="cold", fresh_salt=True
        )
        self._count(ph, cls, "miss")
        self._probe_done(ph)
        rec.phases.append(ph)
        if ph.counted and ph.ttft_seconds is not None:
            got["cold"] = ph.ttft_seconds
        if self.control_url:
            ph, cls, _ = await self._probe(
                c, "control_target", a + self.prompts.tail(sz), expect="miss", path="control_target", role=CONTROL
            )
            self._count(ph, cls, "miss")
            self._probe_done(ph)
            rec.phases.append(ph)
            if ph.counted and ph.ttft_seconds is not None:
                got["control_target"] = ph.ttft_seconds
        return got

    def _judge(
        self, rec: CycleRecord, rev: PhaseRecord, cls: Classification, stored: bool, controls: dict[str, float]
    ) -> None:
        rec.result = cls.result
        if cls.result == "offload_hit":
            ctl = next((controls[k] for k in CONTROL_ORDER if k in controls), None)
            ttft = rev.ttft_seconds
            slower = ctl is not None and ttft is not None and ttft > ctl
            rec.reason = "loaded_but_slower" if slower else "ok"
            if ctl is not None and ttft is not None:
                rec.detail = f"offload {ttft * 1000:.1f} ms vs control {ctl * 1000:.1f} ms"
            return
        gpu_part = cls.result == "partial" and rev.gpu_hit_tokens > 0 and rev.load_bytes == 0
        rec.reason = revisit_reason(
            cls.result, stored, self.state.offload_hits_seen > 0 or rev.load_bytes > 0, gpu_part
        )
        rec.detail = cls.note

    @staticmethod
    def _stored(phases: list[PhaseRecord]) -> bool:
        return sum(p.store_bytes for p in phases) > 0

    async def _seed_and_revisit(self, c: int, rec: CycleRecord) -> tuple[list[int], list[int] | None, bool]:
        """Seed prefix A (and B for the recompute control), revisit A on the GPU; learn bytes/token."""
        assert self.conditions is not None
        sz = self.conditions.sizing
        a = self.prompts.prefix(sz, c, "A")
        b = self.prompts.prefix(sz, c, "B") if self._use_recompute() else None
        seed = await self._seed(c, rec, a + self.prompts.tail(sz), "seed")
        ph, cls, _ = await self._probe(c, "gpu_revisit", a + self.prompts.tail(sz), expect="gpu_hit", path="gpu_hit")
        self._count(ph, cls, "gpu_hit")
        self._probe_done(ph)
        rec.phases.append(ph)
        # B is seeded after A's GPU revisit: A and B together may not fit the GPU cache.
        seed_b = await self._seed(c, rec, b + self.prompts.tail(sz), "seed_b") if b is not None else None
        seeded = [seed, ph] + ([seed_b] if seed_b else [])
        stored = self._stored(seeded)
        self._learn(seeded, 2 if seed_b else 1)
        return a, b, stored

    async def _cycle_pressure(self, c: int, rec: CycleRecord) -> None:
        a, b, stored = await self._seed_and_revisit(c, rec)
        assert self.conditions is not None
        sz = self.conditions.sizing
        rec.phases.append(await self._displace(c))
        rev, cls, _ = await self._probe(
            c, "offload_revisit", a + self.prompts.tail(sz), expect="offload_hit", path="offload_hit"
        )
        self._revisit_done(rev, cls)
        rec.phases.append(rev)
        controls = await self._controls(c, rec, a, b)
        self._judge(rec, rev, cls, stored, controls)

    def _revisit_done(self, rev: PhaseRecord, cls: Classification) -> None:
        self._count(rev, cls, "offload_hit")
        if cls.result != "gpu_hit":
            self.state.offload_attempts += 1  # displaced: the tier had its chance
        if cls.result == "offload_hit":
            self.state.offload_hits_seen += 1
        self._probe_done(rev)

    async def _cycle_wait(self, c: int, rec: CycleRecord) -> None:
        a, b, stored = await self._seed_and_revisit(c, rec)
        assert self.conditions is not None
        sz, s = self.conditions.sizing, self.settings
        idle = s.wait_initial
        while True:
            await self.sleep(idle)
            rev, cls, _ = await self._probe(
                c, "wait_revisit", a + self.prompts.tail(sz), expect="offload_hit", path="offload_hit", idle=idle
            )
            rec.phases.append(rev)
            if cls.result == "gpu_hit":
                self._count(rev, cls, "offload_hit")
                self._probe_done(rev)
                self.state.residency["gpu"] = max(self.state.residency.get("gpu", 0.0), idle)
                if idle * 2 > s.wait_max:
                    rec.result, rec.reason = "gpu_hit", "not_displaced"
                    rec.detail = f"still on the GPU after {idle:.0f}s idle"
                    return
                idle *= 2
                continue
            self._revisit_done(rev, cls)
            if cls.result == "offload_hit":
                self.state.residency["offload"] = max(self.state.residency.get("offload", 0.0), idle)
            controls = await self._controls(c, rec, a, b, idle)
            self._judge(rec, rev, cls, stored, controls)
            return

    # ---- serve loop ------------------------------------------------------------------------------

    async def run_forever(self, on_cycle: Callable[[], None] = lambda: None) -> None:
        """Cycles every `interval` seconds; preflight retried with back-off; budget waits."""
        s = self.settings
        while True:
            started = self.clock()
            try:
                if self.conditions is None:
                    await self.prepare()
                rec = await self.run_cycle()
            except CanaryError as e:
                log.warning("canary %s: %s", self.state.label, e)
                self.conditions = None
                # A target the canary cannot even prepare for is a failed cycle, not silence.
                self.state.cycles["error"] += 1
                self.failing = True
                on_cycle()
                await self.sleep(self.backoff.failure())
                continue
            self.failing = rec is not None and rec.reason == "error"
            on_cycle()
            if rec is None:
                wait = min(s.interval, max(1.0, self.budget.seconds_until(self.cycle_cost())))
                await self.sleep(wait)
                continue
            if rec.reason == "error":
                log.warning("canary %s cycle %d failed: %s", self.state.label, rec.cycle, rec.detail)
                self.conditions = None  # re-read version, models and cache shape before the next try
                await self.sleep(max(self.backoff.failure(self.retry_after), s.interval / 10))
                self.retry_after = None
                continue
            await self.sleep(max(0.0, s.interval - (self.clock() - started)))

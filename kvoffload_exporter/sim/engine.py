"""One simulated vLLM engine (one DP rank): prefix cache, CPU tier, scheduling and counters.

Pure: time comes from an injected clock (model seconds) and randomness from an injected RNG, so
tests drive it step by step. A request's effects are applied as timed events (load done, first
token, finish) whenever the engine is advanced; store statistics are reported on the next engine
step, or after `store_report_delay_s` when no step comes, the way real vLLM reports them late.
"""

from __future__ import annotations

import heapq
import itertools
import math
import random
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from kvoffload_exporter.sim.cache import CpuTier, GpuPrefixCache, Lease, block_hashes, chunk_hashes
from kvoffload_exporter.sim.engineconfig import EngineConfig
from kvoffload_exporter.sim.inflight import InFlight
from kvoffload_exporter.sim.output import DRIFT_REQUESTS, corrupt, output_ids
from kvoffload_exporter.sim.stats import EngineStats
from kvoffload_exporter.sim.timing import RequestTiming, TimeModel
from kvoffload_exporter.sim.versions import Behaviour

SOURCES = ("local_compute", "local_cache_hit", "external_kv_transfer")
CACHED_SOURCES = ("device", "host", "p2p", "disk", "external_unspecified")


@dataclass(frozen=True)
class SimRequest:
    prompt: tuple[int, ...]
    max_tokens: int = 16
    cache_salt: str | None = None
    kv_transfer_params: Mapping[str, object] | None = None
    skip_prefix_cache: bool = False  # prompt_logprobs / echo+logprobs: vLLM reads no cache


@dataclass(frozen=True)
class Plan:
    """What the engine decided for one request; times are engine model seconds."""

    engine: int
    prompt_tokens: int
    max_tokens: int
    gpu_hit: int
    external_hit: int
    load_bytes: int
    stored_chunks: int  # full prompt chunks offered to the tier (ones already there are not written)
    timing: RequestTiming
    arrival: float
    scheduled_at: float
    first_token_at: float
    finish_at: float
    output_ids: tuple[int, ...]

    @property
    def computed(self) -> int:
        return self.prompt_tokens - self.gpu_hit - self.external_hit

    @property
    def cached(self) -> int:
        return self.gpu_hit + self.external_hit

    @property
    def queue_s(self) -> float:
        return self.scheduled_at - self.arrival

    @property
    def engine_ttft_s(self) -> float:
        return self.first_token_at - self.scheduled_at

    def client_time(self, token_index: int) -> float:
        """When the client receives output token `token_index` (0 = first token)."""
        return self.first_token_at + token_index * self.timing.itl_s + self.timing.frontend_s


@dataclass
class _PendingStore:
    chunks: int
    nbytes: int
    seconds: float
    issued_at: float


def _cap(params: Mapping[str, object] | None, key: str) -> int | None:
    """A kv_transfer_params cap: exactly an int ≥ 0, anything else is ignored (vLLM warns)."""
    v = (params or {}).get(key)
    return v if type(v) is int and v >= 0 else None


class Engine:
    def __init__(
        self,
        index: int,
        cfg: EngineConfig,
        behaviour: Behaviour,
        timing: TimeModel,
        clock: Callable[[], float],
        wall: Callable[[], float],
        rng: random.Random | None = None,
    ):
        self.index = index
        self.cfg = cfg
        self.behaviour = behaviour
        self.timing = timing
        self.clock = clock
        self._wall = wall
        self.rng = rng or random.Random(index)
        self.connector = cfg.connector
        self.output_depends_on = "prompt"  # sim/output.py DEPENDS_ON
        self._answered = 0  # requests answered: the `drift` epoch
        self.corrupt_loads = 0.0  # fraction of tier-served requests that answer other tokens
        self.gpu = GpuPrefixCache(cfg.num_gpu_blocks)
        self.tier = CpuTier(cfg.num_cpu_chunks)
        self.inflight = InFlight()
        self._reset_state()

    def _reset_state(self) -> None:
        self.stats = EngineStats(self._wall, self.cfg.max_model_len)
        self.stats.set("engine_sleep_state", 1.0, ("awake",))
        self.stepped = False  # CPU-tier gauges and kv_offload_config_info appear after the first step
        self.gpu.clear()
        self.tier.clear()
        self.inflight.clear()
        self._events: list[tuple[float, int, Callable[[float], None]]] = []
        self._seq = itertools.count()
        self._pending: list[_PendingStore] = []
        self._active: list[Plan] = []
        self._busy_until = 0.0
        self.requests = 0

    # ---- lifecycle -------------------------------------------------------------------------
    def restart(self) -> None:
        """A process restart: every counter back to 0, caches empty, new `_created` times."""
        self._reset_state()

    def advance(self, now: float | None = None) -> None:
        """Apply every event due by `now`; report stores whose report timer ran out."""
        now = self.clock() if now is None else now
        while self._events and self._events[0][0] <= now:
            t, _, fn = heapq.heappop(self._events)
            fn(t)
        delay = self.cfg.store_report_delay_s
        if delay > 0 and any(p.issued_at + delay <= now for p in self._pending):
            self._step(now)
        self._active = [p for p in self._active if p.finish_at > now]
        self._update_gauges(now)

    def _at(self, t: float, fn: Callable[[float], None]) -> None:
        heapq.heappush(self._events, (t, next(self._seq), fn))

    # ---- admission ---------------------------------------------------------------------------
    def submit(self, req: SimRequest, now: float | None = None) -> Plan:
        """Admit a request at `now`: look up both caches, count, and schedule its effects."""
        now = self.clock() if now is None else now
        self.advance(now)
        self._step(now)  # an admission is an engine step: late store completions get reported
        self.requests += 1
        n = len(req.prompt)
        cfg = self.cfg
        hashes = block_hashes(req.prompt, cfg.block_size, req.cache_salt)
        available = 0 if req.skip_prefix_cache else self.gpu.match(hashes)
        hit_blocks = min(available, (n - 1) // cfg.block_size)  # the last token is always computed
        gpu_hit = hit_blocks * cfg.block_size
        chunks = chunk_hashes(hashes, cfg.blocks_per_chunk)
        ext = 0
        if self.connector:
            ext = 0 if req.skip_prefix_cache else self._lookup(req, n, gpu_hit, chunks)
            self.stats.observe("kv_offload_lookup_sync_delay_seconds", self.timing.lookup_seconds())
        recomputed = self._count_lookup(n, gpu_hit, ext, min(available * cfg.block_size, n))
        lease = self.gpu.allocate(
            hashes[:hit_blocks], hashes[hit_blocks:], math.ceil((n + req.max_tokens) / cfg.block_size) - len(hashes)
        )
        load_bytes = ext * cfg.kv_bytes_per_token
        wait = self.inflight.meet(hashes[:hit_blocks], cfg.block_size, now, self.timing.cal)
        timing = self.timing.request(n - gpu_hit - ext + wait.extra_tokens, load_bytes, self.connector)
        scheduled = max(now + timing.queue_s, self._busy_until, wait.not_before)
        first = scheduled + timing.engine_ttft_s
        self.inflight.track(wait, hashes[hit_blocks:], ext // cfg.block_size, scheduled, first, timing.queue_s)
        self._busy_until = first  # prefills are serialised; decode steps are batched for free
        store = self._store_plan(req, n, chunks) if self.connector else []
        plan = Plan(
            engine=self.index,
            prompt_tokens=n,
            max_tokens=req.max_tokens,
            gpu_hit=gpu_hit,
            external_hit=ext,
            load_bytes=load_bytes,
            stored_chunks=len(store),
            timing=timing,
            arrival=now,
            scheduled_at=scheduled,
            first_token_at=first,
            finish_at=first + (req.max_tokens - 1) * timing.itl_s,
            output_ids=self._output(req, ext),
        )
        self._active.append(plan)
        self._schedule(plan, lease, store, recomputed)
        self._update_gauges(now)
        return plan

    def _output(self, req: SimRequest, ext: int) -> tuple[int, ...]:
        self._answered += 1
        how = self.output_depends_on
        nonce = (
            self.rng.getrandbits(63) if how == "random" else self._answered // DRIFT_REQUESTS if how == "drift" else 0
        )
        ids = output_ids(req.prompt, req.max_tokens, how, nonce)
        if ext and self.corrupt_loads and self.rng.random() < self.corrupt_loads:
            return corrupt(ids)
        return ids

    def _lookup(self, req: SimRequest, n: int, gpu_hit: int, chunks: list[bytes]) -> int:
        """External hit tokens: whole chunks after the GPU hit, as OffloadingConnector counts them."""
        size = self.cfg.offload_block_size
        self.tier.touch(chunks)
        if len(chunks) * size - gpu_hit < size:
            return 0
        start = gpu_hit // size
        end = (start + self.tier.lookup(chunks[start:])) * size
        if end >= n:  # the last prompt token is always computed: give back the last chunk
            end -= size
        if self.behaviour.honours_max_load_tokens:
            cap = _cap(req.kv_transfer_params, "max_load_tokens")
            if cap is not None:
                end = min(end, (gpu_hit + cap) // size * size)
            tiers = (req.kv_transfer_params or {}).get("kv_load_tiers")
            if isinstance(tiers, list) and not any(
                isinstance(t, Mapping) and str(t.get("medium", "CPU")).upper() == "CPU" for t in tiers
            ):
                end = 0
        hit = end - gpu_hit
        return hit if hit >= size else 0

    def _store_plan(self, req: SimRequest, n: int, chunks: list[bytes]) -> list[bytes]:
        limit = n
        if self.behaviour.honours_max_offload_tokens:
            cap = _cap(req.kv_transfer_params, "max_offload_tokens")
            if cap is not None:
                limit = min(n, cap)
        return chunks[: limit // self.cfg.offload_block_size]

    def _count_lookup(self, n: int, gpu_hit: int, ext: int, available: int) -> int:
        """Lookup-time counters; returns the cached tokens recomputed because of the last-token rule."""
        s = self.stats
        s.inc("prefix_cache_queries", n)
        s.inc("prefix_cache_hits", gpu_hit)
        if self.connector:  # without a connector the external families exist but stay 0
            s.inc("external_prefix_cache_queries", n if self.behaviour.external_queries_full_prompt else n - gpu_hit)
            s.inc("external_prefix_cache_hits", ext)
        return available - gpu_hit if available >= n else 0

    # ---- timed effects -------------------------------------------------------------------------
    def _schedule(self, plan: Plan, lease: Lease, store: list[bytes], recomputed: int) -> None:
        if plan.load_bytes:
            self._at(plan.scheduled_at, lambda t: self._transfer("load", plan.load_bytes, plan.timing.load_s))
        self._at(plan.first_token_at, lambda t: self._first_token(t, plan, store, recomputed))
        if plan.max_tokens > 1:
            self._at(plan.first_token_at + plan.timing.itl_s, self._step)  # the first decode step
        self._at(plan.finish_at, lambda t: self._finish(plan, lease))

    def _transfer(self, kind: str, nbytes: int, seconds: float) -> None:
        """Flat counters plus the deprecated transfer_type mirror, as vLLM 0.24+ updates both."""
        s = self.stats
        s.inc(f"kv_offload_{kind}_bytes", nbytes)
        s.inc(f"kv_offload_{kind}_time", seconds)
        s.observe(f"kv_offload_{kind}_size", nbytes)
        tt = ("CPU_to_GPU",) if kind == "load" else ("GPU_to_CPU",)
        s.inc("kv_offload_total_bytes", nbytes, tt)
        s.inc("kv_offload_total_time", seconds, tt)
        s.observe("kv_offload_size", nbytes, tt)

    def _first_token(self, t: float, plan: Plan, store: list[bytes], recomputed: int) -> None:
        s = self.stats
        s.inc("prompt_tokens", plan.prompt_tokens)
        local, compute = plan.gpu_hit, plan.computed
        if self.behaviour.recomputed_in_cache_hit and recomputed:
            s.inc("prompt_tokens_recomputed", recomputed)
            local, compute = local + recomputed, compute - recomputed
        for src, v in zip(SOURCES, (compute, local, plan.external_hit)):
            s.inc("prompt_tokens_by_source", v, (src,))
        s.inc("prompt_tokens_cached", plan.cached)
        for src, v in zip(CACHED_SOURCES, (plan.gpu_hit, plan.external_hit, 0, 0, 0)):
            s.inc("prompt_tokens_cached_by_source", v, (src,))
        s.observe("time_to_first_token_seconds", plan.first_token_at - plan.arrival)
        s.observe("request_queue_time_seconds", plan.queue_s)
        s.observe("iteration_tokens_total", plan.computed + 1)
        if store and self.connector:
            self._issue_store(t, store)
        self._step(t)

    def _issue_store(self, t: float, store: list[bytes]) -> None:
        result = self.tier.store(store)
        if result.failed:
            self.stats.inc("kv_offload_allocation_failure")
        if result.new_chunks:
            self.stats.observe("kv_offload_cpu_allocation_size", result.new_chunks)
            nbytes = result.new_chunks * self.cfg.chunk_bytes
            self._pending.append(_PendingStore(result.new_chunks, nbytes, self.timing.store_seconds(nbytes), t))

    def _step(self, t: float) -> None:
        """One engine step: report stores issued before it, refresh the CPU-tier gauges."""
        done = [p for p in self._pending if p.issued_at < t]
        self._pending = [p for p in self._pending if p.issued_at >= t]
        for p in done:
            self._transfer("store", p.nbytes, p.seconds)
        self.stepped = True
        if self.connector:
            inflight = sum(p.chunks for p in self._pending) / max(1, self.cfg.num_cpu_chunks)
            self.stats.set("kv_offload_cpu_cache_write_usage_perc", inflight)
            self.stats.set("kv_offload_cpu_cache_read_usage_perc", 0.0)
            self.stats.set("kv_offload_cpu_cache_usage_perc", inflight)

    def _finish(self, plan: Plan, lease: Lease) -> None:
        s = self.stats
        gen = plan.max_tokens
        s.inc("request_success", 1, ("length",))
        s.inc("generation_tokens", gen)
        s.observe("request_prompt_tokens", plan.prompt_tokens)
        s.observe("request_generation_tokens", gen)
        s.observe("request_max_num_generation_tokens", plan.max_tokens)
        s.observe("request_params_n", 1)
        s.observe("request_params_max_tokens", plan.max_tokens)
        s.observe("request_prefill_kv_computed_tokens", plan.computed)
        s.observe("request_num_preemptions", 0)
        decode = plan.finish_at - plan.first_token_at
        s.observe("e2e_request_latency_seconds", plan.finish_at - plan.arrival)
        s.observe("request_inference_time_seconds", plan.finish_at - plan.scheduled_at)
        s.observe("request_prefill_time_seconds", plan.engine_ttft_s)
        s.observe("request_decode_time_seconds", decode)
        s.observe("request_time_per_output_token_seconds", decode / (gen - 1) if gen > 1 else 0.0)
        for _ in range(gen - 1):
            s.observe("inter_token_latency_seconds", plan.timing.itl_s)
            s.observe("time_per_output_token_seconds", plan.timing.itl_s)
            s.observe("iteration_tokens_total", 1)
        self.gpu.release(lease)

    def _update_gauges(self, now: float) -> None:
        s = self.stats
        waiting = [p for p in self._active if now < p.scheduled_at]
        loading = [p for p in waiting if p.load_bytes]
        s.set("num_requests_running", sum(1 for p in self._active if p.scheduled_at <= now < p.finish_at))
        s.set("num_requests_waiting", len(waiting))
        s.set("num_requests_waiting_by_reason", len(waiting) - len(loading), ("capacity",))
        s.set("num_requests_waiting_by_reason", len(loading), ("deferred",))
        for stage, v in (("waiting_to_start", 0), ("in_progress", len(loading)), ("completed_waiting", 0)):
            s.set("num_requests_kv_fetch_by_stage", v, (stage,))
        usage = self.gpu.usage()
        s.set("kv_cache_usage_perc", usage)
        s.set("gpu_cache_usage_perc", usage)

    # ---- views ---------------------------------------------------------------------------------
    def response_metrics(self, plan: Plan) -> dict[str, float]:
        """The response's `metrics` object (`--enable-per-request-metrics`, 0.25+)."""
        ttft_ms = plan.engine_ttft_s * 1e3
        gen_ms = (plan.finish_at - plan.first_token_at) * 1e3
        out = {
            "time_to_first_token_ms": ttft_ms,
            "generation_time_ms": gen_ms,
            "queue_time_ms": plan.queue_s * 1e3,
            "tokens_per_second": plan.max_tokens / ((ttft_ms + gen_ms) / 1e3) if ttft_ms + gen_ms > 0 else 0.0,
        }
        if plan.max_tokens > 1:
            out["mean_itl_ms"] = gen_ms / (plan.max_tokens - 1)
        return out

    def cache_state(self) -> dict[str, float]:
        """Occupancy the real vLLM does not export (the simulator's own `/_sim/state`)."""
        return {
            "gpu_blocks_cached": len(self.gpu),
            "gpu_blocks": self.cfg.num_gpu_blocks,
            "cpu_chunks_used": len(self.tier),
            "cpu_chunks": self.cfg.num_cpu_chunks,
            "pending_store_chunks": sum(p.chunks for p in self._pending),
            "requests": self.requests,
        }


__all__ = ["CACHED_SOURCES", "SOURCES", "Engine", "EngineConfig", "Plan", "SimRequest"]

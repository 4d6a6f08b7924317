"""Classify one canary probe from its own usage and the counter deltas around it; explain a cycle.

Pure. Counters are engine-wide, so a window may also contain users' requests. Other traffic can only
*add* hits and bytes, and it cannot add more hit tokens than it sent prompt tokens, so the prompt
tokens the canary did not send bound what others may have caused. A revisit is an `offload_hit`
only when the load bytes (and external hit tokens) cover the whole prefix; it is a `gpu_hit` when the
GPU prefix hits cover it; when both are covered and other traffic could explain either, it is marked
ambiguous and kept out of the timing statistics. TTFT is never used to classify.
"""

from __future__ import annotations

from dataclasses import dataclass

from kvoffload_exporter.canary.types import CycleReason, ProbeResult
from kvoffload_exporter.derive.window import EngineDerived, interval
from kvoffload_exporter.ingest.backends.schema import Evidence, NativeUnit
from kvoffload_exporter.ingest.snapshot import Signal, Snapshot


@dataclass(frozen=True)
class Deltas:
    """Counter increases between two scrapes, summed over the engines serving the canary's model."""

    configured: bool  # the offload connector's families are present
    load_bytes: float = 0.0
    store_bytes: float = 0.0
    gpu_hits: float = 0.0
    ext_hits: float = 0.0
    prompt_tokens: float | None = None  # None: vllm:prompt_tokens not exported
    # Loads of backends that count no bytes (SimpleCPU blocks, LMCache tokens, KVBM blocks), in tokens
    # where the exposition gives the factor (block_size); `other_loads` is any such load at all.
    loaded_tokens: float | None = None
    other_loads: float = 0.0
    other_stores: float = 0.0

    @property
    def loaded(self) -> bool:
        """Anything at all came back from the offload tier, in whatever unit the backend counts."""
        return self.load_bytes > 0 or self.other_loads > 0

    @classmethod
    def between(cls, before: Snapshot | None, after: Snapshot, model: str | None = None) -> Deltas:
        derived = interval(before, after)
        sums = {
            Signal.OFFLOAD_LOAD_BYTES: 0.0,
            Signal.OFFLOAD_STORE_BYTES: 0.0,
            Signal.GPU_PREFIX_HITS: 0.0,
            Signal.EXTERNAL_PREFIX_HITS: 0.0,
        }
        prompt: float | None = None
        tokens: float | None = None
        other = stores = 0.0
        for (m, _engine), d in derived.items():
            if model and m and m != model:
                continue
            for k in sums:
                sums[k] += max(d.deltas.get(k, 0.0), _backend_bytes(d, k))
            t, o = _unit_loads(d, after)
            other += o
            stores += sum(
                v for k, v in d.evidence.items() if k.signal == Evidence.STORED and k.unit != NativeUnit.BYTES
            )
            if t is not None:
                tokens = (tokens or 0.0) + t
            if Signal.PROMPT_TOKENS in d.deltas:
                prompt = (prompt or 0.0) + d.deltas[Signal.PROMPT_TOKENS]
        return cls(
            configured=after.offload_configured,
            load_bytes=sums[Signal.OFFLOAD_LOAD_BYTES],
            store_bytes=sums[Signal.OFFLOAD_STORE_BYTES],
            gpu_hits=sums[Signal.GPU_PREFIX_HITS],
            ext_hits=sums[Signal.EXTERNAL_PREFIX_HITS],
            prompt_tokens=prompt,
            loaded_tokens=tokens,
            other_loads=other,
            other_stores=stores,
        )

    def others(self, own_tokens: int) -> float:
        """Prompt tokens of other traffic in the window (0 when unknown: then counters are trusted)."""
        if self.prompt_tokens is None:
            return 0.0
        return max(0.0, self.prompt_tokens - own_tokens)


_BYTES_OF = {Signal.OFFLOAD_LOAD_BYTES: Evidence.LOADED, Signal.OFFLOAD_STORE_BYTES: Evidence.STORED}


def _backend_bytes(d: EngineDerived, sig: Signal) -> float:
    """Bytes a backend counts in its own families (Mooncake store) for a native byte signal; where the
    native family is read it is the same number (max, never a sum)."""
    ev = _BYTES_OF.get(sig)
    if ev is None:
        return 0.0
    return sum(v for k, v in d.evidence.items() if k.signal == ev and k.unit == NativeUnit.BYTES and not k.tier)


def _unit_loads(d: EngineDerived, after: Snapshot) -> tuple[float | None, float]:
    """(loads in tokens, any non-byte load) of one engine: tokens as is, blocks x block_size; chunks
    and other units only say *that* something loaded (their size is not in the exposition)."""
    e = after.engine(d.key)
    try:
        block = float(e.cache_config.get("block_size", "")) if e else None
    except ValueError:
        block = None
    tokens: float | None = None
    other = 0.0
    for k, v in d.evidence.items():
        if k.signal != Evidence.LOADED or k.unit == NativeUnit.BYTES:
            continue
        other += v
        if k.unit == NativeUnit.TOKENS:
            tokens = (tokens or 0.0) + v
        elif k.unit == NativeUnit.BLOCKS and block:
            tokens = (tokens or 0.0) + v * block
    return tokens, other


@dataclass(frozen=True)
class Classification:
    result: str  # offload_hit | gpu_hit | partial | miss
    hit_tokens: float  # cached tokens the server reported (or the counters' estimate)
    loaded_tokens: float | None  # load bytes / bytes per token (None: bytes per token unknown)
    others_tokens: float
    ambiguous: bool = False
    note: str = ""


def _loaded_tokens(d: Deltas, bytes_per_token: float | None) -> float | None:
    """Tokens the window loaded: from bytes when the bytes per token are known, else the backend's own
    token/block count; 0 when bytes are known and nobody else loaded."""
    loaded = d.load_bytes / bytes_per_token if bytes_per_token and d.load_bytes else d.loaded_tokens
    if loaded is None and bytes_per_token and not d.other_loads:
        return 0.0
    return loaded


def _partial_note(d: Deltas) -> str:
    note = "some prefix tokens recomputed"
    if d.configured and d.load_bytes > 0:
        return note + f"; {d.load_bytes:.0f} B loaded"
    if d.configured and d.loaded:
        return note + "; loads seen (non-byte units)"
    return note


def classify(
    expected: int,
    cached: int | None,
    d: Deltas,
    own_tokens: int,
    bytes_per_token: float | None,
    tolerance: int = 0,
    expect: str = ProbeResult.OFFLOAD_HIT,
) -> Classification:
    """`expected`: prefix tokens a full hit serves; `cached`: usage.prompt_tokens_details.cached_tokens
    (None when the server does not send it); `own_tokens`: prompt tokens the canary sent in the window;
    `expect`: what the phase was designed to produce (used only to label an ambiguous window)."""
    full = max(1, expected - tolerance)
    others = d.others(own_tokens)
    loaded = _loaded_tokens(d, bytes_per_token)
    if cached is not None:
        hit = float(cached)
    else:  # no usage details: the counters' upper bound, exact while nobody else sends requests
        hit = float(min(expected, max(d.gpu_hits, d.ext_hits if d.configured else 0.0)))
    if hit <= 0 or hit < min(full, max(1, tolerance + 1)):
        return Classification(ProbeResult.MISS, hit, loaded, others)
    if loaded is not None:
        load_covers = d.configured and loaded >= full
    else:  # bytes per token not learned yet (no store seen): loads plus external hits must be there
        load_covers = d.configured and d.loaded and d.ext_hits >= full
    ext_covers = d.ext_hits >= full
    gpu_covers = d.gpu_hits >= full
    if hit < full:
        return Classification(ProbeResult.PARTIAL, hit, loaded, others, note=_partial_note(d))
    if load_covers and ext_covers:
        if gpu_covers and d.gpu_hits - others >= full:
            return Classification(
                ProbeResult.GPU_HIT, hit, loaded, others, note="loads in the window were other traffic's"
            )
        if gpu_covers:
            result = expect if expect in (ProbeResult.GPU_HIT, ProbeResult.OFFLOAD_HIT) else ProbeResult.OFFLOAD_HIT
            return Classification(
                result,
                hit,
                loaded,
                others,
                ambiguous=True,
                note=f"{others:.0f} other prompt tokens could explain both GPU hits and loads",
            )
        return Classification(ProbeResult.OFFLOAD_HIT, hit, loaded, others)
    if gpu_covers:
        return Classification(ProbeResult.GPU_HIT, hit, loaded, others)
    if not d.configured and cached is not None:
        return Classification(ProbeResult.GPU_HIT, hit, loaded, others, note="no connector: any hit is a GPU hit")
    if d.configured and d.loaded:
        return Classification(
            ProbeResult.PARTIAL,
            hit,
            loaded,
            others,
            note="hit split between GPU and offload tier, or the load did not cover it",
        )
    return Classification(ProbeResult.PARTIAL, hit, loaded, others, note="hit not visible in the counters")


def revisit_reason(result: str, stored: bool, loads_seen_before: bool, gpu_part: bool = False) -> CycleReason:
    """Reason for a cycle whose displaced revisit came back as `result` (not offload_hit)."""
    if not stored:
        return CycleReason.NO_STORE
    if result == ProbeResult.GPU_HIT or (result == ProbeResult.PARTIAL and gpu_part):
        return CycleReason.NOT_DISPLACED
    # Nothing loaded although the prefix was stored: either the tier lost it or the load path is
    # broken. A target that has served offload hits before evidently loads, so the entry is gone.
    return CycleReason.EVICTED_FROM_TIER if loads_seen_before else CycleReason.NO_LOAD

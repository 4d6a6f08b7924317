"""Canary planning: prompt sizes from the engine's cache facts, token-id prompts and cache salts.

Pure. Prompts are token-id lists (they work with `--skip-tokenizer-init` and never drift through a
tokenizer) built as `prefix + tail`: the prefix is a whole number of offload chunks, the tail is
shorter than one GPU block and unique per request, so a revisit can hit exactly the prefix on either
tier (vLLM never serves the last prompt token from cache, and hits come in whole blocks / chunks).
Every canary request carries a salt derived from a per-installation secret, so canary KV never
shares cache blocks with users' requests (vLLM mixes the salt into the first block hash only, and
hashes chain).
"""

from __future__ import annotations

import hashlib
import hmac
import math
import random
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TypedDict

from kvoffload_exporter.ingest.snapshot import EngineSignals

DEFAULT_ALIGN = 256
"""Prefix alignment when the offload chunk size is unknown (vLLM < 0.33 does not export it): every
common chunk size (16, 32, 64, 128, 256 tokens) divides it."""

OUTPUT_TOKENS = 8
"""Tokens a probe generates: enough for the output check to compare answers (canary/cycle/outputcheck.py), few
enough to cost little; TTFT is still the first of them."""

SALT_MAX = 128
_SALT_FORBIDDEN = set("@/\\\x00")


def _int(raw: object) -> int | None:
    try:
        v = int(float(str(raw)))
    except (TypeError, ValueError):
        return None
    return v if v > 0 else None


@dataclass(frozen=True)
class CacheFacts:
    """What the server says about its caches (None: not exported)."""

    block_size: int | None = None
    num_gpu_blocks: int | None = None
    chunk_tokens: int | None = None  # offload chunk (0.33 kv_offload_config_info), else unknown
    max_model_len: int | None = None
    offload_configured: bool = False

    @property
    def gpu_cache_tokens(self) -> int | None:
        if self.block_size and self.num_gpu_blocks:
            return self.block_size * self.num_gpu_blocks
        return None

    @classmethod
    def from_engine(
        cls, e: EngineSignals | None, max_model_len: int | None = None, offload_configured: bool = False
    ) -> CacheFacts:
        if e is None:
            return cls(max_model_len=max_model_len, offload_configured=offload_configured)
        block = _int(e.cache_config.get("block_size"))
        bpc = _int(e.offload_config.get("cpu_blocks_per_chunk"))
        return cls(
            block_size=block,
            num_gpu_blocks=_int(e.cache_config.get("num_gpu_blocks")),
            chunk_tokens=bpc * block if bpc and block else None,
            max_model_len=max_model_len,
            offload_configured=offload_configured,
        )


class PlanError(ValueError):
    """The server's shape does not allow a meaningful canary (e.g. max_model_len too short)."""


class SizingDoc(TypedDict, total=False):
    """`conditions.sizing` of the check document (`Sizing.as_dict`); total=False as records.ServerDoc."""

    align: int
    chunk_known: bool
    block_size: int
    prefix_tokens: int
    tail_tokens: int
    prompt_tokens: int
    filler_tokens: int
    filler_count: int
    flush_tokens: int


@dataclass(frozen=True)
class Sizing:
    align: int  # prefix multiple: the offload chunk when known, else DEFAULT_ALIGN (and the GPU block)
    chunk_known: bool
    block_size: int
    prefix_tokens: int
    tail_tokens: int
    filler_tokens: int
    filler_count: int  # 0 when the GPU cache size is unknown (pressure impossible)
    flush_tokens: int

    @property
    def prompt_tokens(self) -> int:
        return self.prefix_tokens + self.tail_tokens

    @property
    def tolerance(self) -> int:
        """Hit tokens may fall short of the prefix by less than one alignment unit and still be full."""
        return max(1, min(self.align, self.block_size)) - 1

    @property
    def filler_total(self) -> int:
        return self.filler_tokens * self.filler_count

    def as_dict(self) -> SizingDoc:
        return {
            "align": self.align,
            "chunk_known": self.chunk_known,
            "block_size": self.block_size,
            "prefix_tokens": self.prefix_tokens,
            "tail_tokens": self.tail_tokens,
            "prompt_tokens": self.prompt_tokens,
            "filler_tokens": self.filler_tokens,
            "filler_count": self.filler_count,
            "flush_tokens": self.flush_tokens,
        }


def size(
    facts: CacheFacts,
    prefix_tokens: int | None = None,
    chunk_tokens: int | None = None,
    filler_tokens: int | None = None,
    pressure_factor: float = 1.5,
    resident: int = 1,
) -> Sizing:
    """Plan prompt sizes. Overrides win; the prefix is rounded down to the alignment unit.

    Default prefix: the GPU cache / (`resident` + 1) — `resident` prefixes must sit in the GPU cache
    together (2 for the wait strategy with a recompute control) — at most 8192 tokens and what
    max_model_len allows, at least four offload chunks. Fillers: distinct prompts whose total is
    `pressure_factor` × the GPU cache (LRU evicts the oldest blocks first, so the canary prefix goes
    before the fillers do).
    """
    block = facts.block_size or 16
    chunk = chunk_tokens or facts.chunk_tokens
    if chunk:
        align = chunk if chunk % block == 0 else chunk * block // math.gcd(chunk, block)
    else:
        align = DEFAULT_ALIGN * block // math.gcd(DEFAULT_ALIGN, block)
    tail = max(1, min(8, block // 2))  # shorter than one block: the revisit hits exactly the prefix
    max_len = facts.max_model_len or 8192
    max_prompt = max_len - OUTPUT_TOKENS  # room for the probe's generated tokens
    cache = facts.gpu_cache_tokens
    if prefix_tokens:
        prefix = (prefix_tokens // align) * align
        if prefix < align:
            raise PlanError(f"prefix of {prefix_tokens} tokens is shorter than one offload chunk ({align})")
    else:
        target = min(8192, cache // (resident + 1) if cache else 4096, max_prompt - tail)
        prefix = max(4 * align, (target // align) * align)
    if prefix + tail > max_prompt:
        raise PlanError(
            f"prefix {prefix} + tail {tail} tokens exceed max_model_len {max_len} less {OUTPUT_TOKENS} generated; "
            "set a smaller --prefix-tokens"
        )
    if cache and resident * (prefix + tail) > cache:
        raise PlanError(
            f"{resident} prefix(es) of {prefix} tokens do not fit the GPU cache of {cache} tokens"
            + ("; use a smaller --prefix-tokens or drop the recompute control" if resident > 1 else "")
        )
    filler = min(max_prompt, filler_tokens or prefix + tail)
    count = math.ceil(pressure_factor * cache / filler) if cache else 0
    return Sizing(
        align=align,
        chunk_known=bool(chunk),
        block_size=block,
        prefix_tokens=prefix,
        tail_tokens=tail,
        filler_tokens=filler,
        filler_count=count,
        flush_tokens=min(4, tail + 3),
    )


def check_salt(salt: str) -> str:
    """vLLM 0.32+ accepts at most 128 characters and no `@ / \\ NUL`; older versions any non-empty string."""
    if not salt or len(salt) > SALT_MAX or set(salt) & _SALT_FORBIDDEN:
        raise ValueError(f"cache salt must be 1..{SALT_MAX} characters without @ / \\")
    return salt


class Prompts:
    """Deterministic token-id prompts and salts for one canary run.

    `secret` fixes the installation's salt family; `nonce` (random per process) keeps prefixes of a
    restarted exporter distinct from ones an earlier run may have left in the caches.
    """

    def __init__(self, secret: bytes, nonce: str, id_range: tuple[int, int] = (1000, 30000)):
        self._secret = secret
        self.nonce = nonce
        self.lo, self.hi = id_range
        if not 0 <= self.lo < self.hi:
            raise ValueError(f"bad token id range {id_range}")
        self.salt = check_salt("kvoffload-canary-" + hmac.new(secret, b"salt", hashlib.sha256).hexdigest()[:24])
        self._counter = 0

    def _rng(self, *parts: object) -> random.Random:
        key = "\x1f".join(str(p) for p in (self.nonce, *parts)).encode()
        return random.Random(hmac.new(self._secret, key, hashlib.sha256).digest())

    def tokens(self, n: int, *parts: object) -> list[int]:
        rng = self._rng(*parts)
        return [rng.randrange(self.lo, self.hi) for _ in range(n)]

    def prefix(self, sizing: Sizing, cycle: int, name: str) -> list[int]:
        return self.tokens(sizing.prefix_tokens, "prefix", cycle, name)

    def tail(self, sizing: Sizing) -> list[int]:
        """A fresh tail per request: no two canary prompts are identical."""
        self._counter += 1
        return self.tokens(sizing.tail_tokens, "tail", self._counter)

    def fresh(self, n: int, kind: str) -> list[int]:
        self._counter += 1
        return self.tokens(n, kind, self._counter)

    def fresh_salt(self, kind: str) -> str:
        """A salt nobody has used: cold controls, fillers and flushes never hit anything."""
        self._counter += 1
        return check_salt(f"{self.salt}-{kind}-{self.nonce}-{self._counter}")

    @property
    def fingerprint(self) -> str:
        """Identifies the salt family in evidence without revealing the salt itself."""
        return hashlib.sha256(self.salt.encode()).hexdigest()[:12]


def parse_version(v: str | None) -> tuple[int, ...] | None:
    """ "0.26.0" → (0, 26, 0); "0.11.0rc1+cu130" → (0, 11, 0); None when unreadable."""
    if not v:
        return None
    out = []
    for part in v.split("+")[0].split(".")[:3]:
        digits = ""
        for ch in part:
            if not ch.isdigit():
                break
            digits += ch
        if not digits:
            break
        out.append(int(digits))
    return tuple(out) if out else None


def honours_max_load_tokens(version: str | None) -> bool | None:
    """What the version table says (0.32+); a prior only — the engine checks the counters."""
    v = parse_version(version)
    return None if v is None else v >= (0, 32)


def cache_summary(cache_config: Mapping[str, str]) -> dict[str, str]:
    keys = (
        "block_size",
        "num_gpu_blocks",
        "kv_cache_size_tokens",
        "enable_prefix_caching",
        "kv_offloading_backend",
        "kv_offloading_size",
        "num_cpu_blocks",
    )
    return {k: cache_config[k] for k in keys if k in cache_config}

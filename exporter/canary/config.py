"""Canary settings: the `canary:` mapping of the config file and the CLI flags → frozen `CanarySettings`.

Pure. Every problem is reported together (ConfigError), like the rest of the configuration. The API
key is never part of the settings, only where to read it from.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from typing import Any
from urllib.parse import urlsplit

from exporter.config import ConfigError, parse_duration

STRATEGIES = ("pressure", "wait")


@dataclass(frozen=True)
class CanarySettings:
    enabled: bool = False
    strategy: str = "wait"  # pressure needs allow_pressure: fillers evict users' GPU cache
    allow_pressure: bool = False
    budget_tokens_per_hour: int | None = 200_000  # None: unlimited (check's default)
    interval: float = 300.0  # serve: seconds between cycle starts
    prefix_tokens: int | None = None  # default from cache_config_info (plan.size)
    chunk_tokens: int | None = None  # offload chunk; exported only by vLLM 0.33
    filler_tokens: int | None = None
    settle: float = 0.5  # wait after a probe and after its flush request (store statistics lag)
    flush: bool = True
    min_samples: int = 10
    max_samples: int = 50  # rolling samples per path kept for the statistics
    confidence: float = 0.95
    bootstrap: int = 2000
    seed: int = 0
    recompute_control: bool = True  # max_load_tokens: 0 probe; dropped once the counters show it ignored
    wait_initial: float = 30.0  # wait strategy: first idle time before a revisit, doubled each time
    wait_max: float = 1800.0
    request_timeout: float = 120.0
    id_range: tuple[int, int] = (1000, 30000)
    secret_file: str | None = None  # persisted random secret; default under ~/.local/state
    api_key_file: str | None = None
    api_key_env: str = "KVOFFLOAD_API_KEY"
    control_target: str | None = None
    model: str | None = None  # default: first model of /v1/models
    backoff_initial: float = 5.0
    backoff_max: float = 600.0

    @property
    def effective_strategy(self) -> str:
        return "pressure" if self.strategy == "pressure" and self.allow_pressure else "wait"

    def public(self) -> dict[str, Any]:
        """Settings for evidence files (paths only, never the key or the secret)."""
        return {f.name: getattr(self, f.name) for f in fields(self)}


_INT_KEYS = {
    "budget_tokens_per_hour": 0,
    "prefix_tokens": 1,
    "chunk_tokens": 1,
    "filler_tokens": 1,
    "min_samples": 2,
    "max_samples": 2,
    "bootstrap": 100,
    "seed": 0,
}
_DUR_KEYS = ("interval", "settle", "wait_initial", "wait_max", "request_timeout", "backoff_initial", "backoff_max")
_BOOL_KEYS = ("enabled", "allow_pressure", "flush", "recompute_control")
_STR_KEYS = ("secret_file", "api_key_file", "api_key_env", "control_target", "model")


def from_mapping(raw: Mapping[str, Any] | None, base: CanarySettings | None = None) -> CanarySettings:
    """Validate a `canary:` mapping on top of `base`. Raises ConfigError listing every problem."""
    cfg = base or CanarySettings()
    raw = raw or {}
    errors: list[str] = []
    known = {f.name for f in fields(CanarySettings)}
    changes: dict[str, Any] = {}
    for k in sorted(set(raw) - known):
        errors.append(f"canary: unknown key {k!r}" + (" (put the key in a file: api_key_file)" if "key" in k else ""))
    for k, lo in _INT_KEYS.items():
        if k in raw and raw[k] is not None:
            v = raw[k]
            if isinstance(v, bool) or not isinstance(v, int) or v < lo:
                errors.append(f"canary.{k}: must be an integer >= {lo}")
            else:
                changes[k] = v
        elif k in raw and k in ("budget_tokens_per_hour", "prefix_tokens", "chunk_tokens", "filler_tokens"):
            changes[k] = None
    for k in _DUR_KEYS:
        if k in raw:
            try:
                v = parse_duration(raw[k])
                if v < 0 or (v == 0 and k not in ("settle",)):
                    raise ValueError(f"must be > 0, got {raw[k]!r}")
                changes[k] = v
            except ValueError as e:
                errors.append(f"canary.{k}: {e}")
    for k in _BOOL_KEYS:
        if k in raw:
            if not isinstance(raw[k], bool):
                errors.append(f"canary.{k}: must be true or false")
            else:
                changes[k] = raw[k]
    for k in _STR_KEYS:
        if k in raw and raw[k] is not None:
            if not isinstance(raw[k], str) or not raw[k]:
                errors.append(f"canary.{k}: must be a non-empty string")
            else:
                changes[k] = raw[k]
    if "strategy" in raw:
        if raw["strategy"] not in STRATEGIES:
            errors.append(f"canary.strategy: must be one of {', '.join(STRATEGIES)}")
        else:
            changes["strategy"] = raw["strategy"]
    if "confidence" in raw:
        v = raw["confidence"]
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0.5 <= v < 1:
            errors.append("canary.confidence: must be a number in [0.5, 1)")
        else:
            changes["confidence"] = float(v)
    if "id_range" in raw:
        v = raw["id_range"]
        if (
            not isinstance(v, (list, tuple))
            or len(v) != 2
            or not all(isinstance(x, int) for x in v)
            or not 0 <= v[0] < v[1]
            or v[1] - v[0] < 1000
        ):
            errors.append("canary.id_range: must be [LOW, HIGH] token ids with 0 <= LOW and HIGH - LOW >= 1000")
        else:
            changes["id_range"] = (int(v[0]), int(v[1]))
    url = changes.get("control_target")
    if url:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            errors.append(f"canary.control_target: must be http(s)://HOST:PORT, got {url!r}")
        else:
            changes["control_target"] = url.rstrip("/")
    if errors:
        raise ConfigError(errors)
    cfg = replace(cfg, **changes)
    check(cfg)
    return cfg


def check(cfg: CanarySettings) -> None:
    errors = []
    if cfg.strategy == "pressure" and not cfg.allow_pressure:
        errors.append(
            "canary.strategy pressure evicts users' GPU cache: it needs allow_pressure: true "
            "(--canary-allow-pressure / --allow-pressure), meant for staging"
        )
    if cfg.wait_initial > cfg.wait_max:
        errors.append("canary.wait_initial must not exceed wait_max")
    if cfg.min_samples > cfg.max_samples:
        errors.append("canary.min_samples must not exceed max_samples")
    if errors:
        raise ConfigError(errors)

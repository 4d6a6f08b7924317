"""Canary settings: the `canary:` mapping of the config file, `serve --canary-*` and `check`'s flags →
frozen `CanarySettings`, each field declared once (kvoffload_exporter.config.schema).

Pure. Every problem is reported together (ConfigError), like the rest of the configuration. The API
key is never part of the settings, only where to read it from.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from urllib.parse import urlsplit

from kvoffload_exporter.config.schema import (
    ConfigError,
    Where,
    apply,
    boolean,
    choice,
    duration,
    integer,
    number,
    parse_section,
    setting,
    string,
)
from kvoffload_exporter.config.sections import Section, register_section
from kvoffload_exporter.config.settings import Config

STRATEGIES = ("pressure", "wait")


def _id_range(v: object, text: bool) -> object:
    if (
        not isinstance(v, (list, tuple))
        or len(v) != 2
        or not all(isinstance(x, int) and not isinstance(x, bool) for x in v)
        or not 0 <= v[0] < v[1]
        or v[1] - v[0] < 1000
    ):
        raise ValueError("must be [LOW, HIGH] token ids with 0 <= LOW and HIGH - LOW >= 1000")
    return (int(v[0]), int(v[1]))


def _control_url(v: object, text: bool) -> object:
    if v is None:
        return None
    if not isinstance(v, str):
        raise ValueError("must be http(s)://HOST:PORT")
    try:
        parts = urlsplit(v)
        parts.port  # noqa: B018 - raises on a bad port
    except ValueError:
        raise ValueError(f"must be http(s)://HOST:PORT, got {v.rpartition('@')[2]!r}") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"must be http(s)://HOST:PORT, got {v.rpartition('@')[2]!r}")
    if "@" in parts.netloc:  # it would end up in evidence files and labels; the canary uses an API key
        raise ValueError("must not contain user:password@ (the canary authenticates with api_key_file)")
    return v.rstrip("/")


_N = "N"


@dataclass(frozen=True)
class CanarySettings:
    enabled: bool = setting(
        False,
        boolean,
        "run closed-loop offload canaries against every target (wait strategy unless --canary.allow-pressure)",
        flag="--[no-]canary.enabled",
        old="--canary",
        action="switch",
    )
    strategy: str = setting("wait", choice(*STRATEGIES), "pressure needs allow_pressure (fillers evict GPU cache)")
    allow_pressure: bool = setting(
        False,
        boolean,
        "displace canary prefixes with filler requests: evicts users' GPU cache, staging only",
        flag="--[no-]canary.allow-pressure",
        old="--canary-allow-pressure",
        action="switch",
    )
    budget_tokens_per_hour: int | None = setting(
        600_000,  # 10 cycles within the hour on the reference shapes (docs/canary.md, the token budget)
        integer(0, optional=True),
        "hard cap on canary prompt + output tokens per hour and target (null or unlimited: no cap)",
        flag="--canary.budget-tokens-per-hour",
        old="--canary-budget-tokens-per-hour",
        check_flag="--budget-tokens-per-hour",
        check_old="--budget-tokens",
        metavar=_N,
    )
    interval: float = setting(
        300.0,
        duration(),
        "time between canary cycles",
        flag="--canary.interval",
        old="--canary-interval",
        metavar="DURATION",
    )
    prefix_tokens: int | None = setting(
        None,
        integer(1, optional=True),
        "shared prefix length (default: half the GPU cache from cache_config_info, <= 8192)",
        flag="--canary.prefix-tokens",
        old="--canary-prefix-tokens",
        check_flag="--prefix-tokens",
        metavar=_N,
    )
    chunk_tokens: int | None = setting(
        None,
        integer(1, optional=True),
        "offload chunk in tokens if vLLM does not export it (vLLM < 0.33; default: align to 256)",
        flag="--canary.chunk-tokens",
        old="--canary-chunk-tokens",
        check_flag="--chunk-tokens",
        metavar=_N,
    )
    filler_tokens: int | None = setting(
        None,
        integer(1, optional=True),
        "tokens per filler request (default: prompt size)",
        check_flag="--filler-tokens",
        metavar=_N,
    )
    settle: float = setting(
        0.5,
        duration(positive=False),
        "wait after each probe and after its flush request before scraping",
        check_flag="--settle",
        metavar="SECONDS",
    )
    flush: bool = setting(
        True,
        boolean,
        "a tiny flush request after probes (store statistics lag)",
        check_flag="--no-flush",
        action="switch",
    )
    min_samples: int = setting(
        10,
        integer(5),
        "counted samples per path needed for a verdict (at least 5: from 3 a 95 percent interval errs 1 time in 10)",
        check_flag="--min-samples",
        metavar=_N,
    )
    max_samples: int = setting(50, integer(2), "rolling samples per path kept for the statistics")
    confidence: float = setting(
        0.95,
        number(0.5, 1, hi_open=True),
        "confidence of the delta TTFT interval (a check sweep splits it over its levels)",
    )
    bootstrap: int = setting(2000, integer(100), "bootstrap resamples of the descriptive p90 interval")
    seed: int = setting(
        0,
        integer(0),
        "seed of each round's probe order and of the descriptive p90 bootstrap",
        check_flag="--seed",
        metavar=_N,
    )
    recompute_control: bool = setting(
        True,
        boolean,
        "the max_load_tokens: 0 recompute control",
        check_flag="--no-recompute-control",
        action="switch",
    )
    wait_initial: float = setting(
        30.0, duration(), "wait strategy: first idle time", check_flag="--wait-initial", metavar="DURATION"
    )
    wait_max: float = setting(
        1800.0, duration(), "wait strategy: longest idle time", check_flag="--wait-max", metavar="DURATION"
    )
    request_timeout: float = setting(
        120.0,
        duration(),
        "per-request timeout",
        check_flag="--request-timeout",
        check_old="--timeout",
        metavar="SECONDS",
    )
    id_range: tuple[int, int] = setting((1000, 30000), _id_range, "token ids used for canary prompts", env=False)
    secret_file: str | None = setting(
        None,
        string(optional=True),
        "persisted salt secret, created on first use (default ~/.local/state/kvoffload-exporter/canary-secret)",
        flag="--canary.secret-file",
        old="--canary-secret-file",
        check_flag="--secret-file",
        metavar="FILE",
    )
    api_key_file: str | None = setting(
        None,
        string(optional=True),
        "vLLM API key file (else $KVOFFLOAD_API_KEY); never logged",
        flag="--canary.api-key-file",
        old="--api-key-file",
        check_flag="--api-key-file",
        metavar="FILE",
    )
    api_key_env: str = setting("KVOFFLOAD_API_KEY", string(), "environment variable holding the API key", env=False)
    control_target: str | None = setting(
        None,
        _control_url,
        "the same model served without the offload connector (one target only)",
        flag="--canary.control-target",
        old="--canary-control-target",
        check_flag="--control-target",
        metavar="URL",
    )
    model: str | None = setting(
        None,
        string(optional=True),
        "model to probe (default: the first of /v1/models)",
        check_flag="--model",
        metavar="NAME",
    )
    backoff_initial: float = setting(5.0, duration(), "first retry delay after a failed cycle")
    backoff_max: float = setting(600.0, duration(), "longest retry delay")

    @property
    def effective_strategy(self) -> str:
        return "pressure" if self.strategy == "pressure" and self.allow_pressure else "wait"

    def public(self) -> dict[str, object]:
        """Settings for evidence files (paths only, never the key or the secret)."""
        return {f.name: getattr(self, f.name) for f in fields(self)}


def from_mapping(
    raw: Mapping[str, object] | None, base: CanarySettings | None = None, validate: bool = True
) -> CanarySettings:
    """Validate a `canary:` mapping on top of `base`. Raises ConfigError listing every problem."""
    if raw is not None and not isinstance(raw, Mapping):
        raise ConfigError(["canary: must be a mapping (or true/false)"])
    raw = raw or {}
    known = {f.name for f in fields(CanarySettings)}
    inline = {k for k in raw if "key" in str(k) and k not in known}  # never echo what might be a key
    errors = [f"canary: unknown key {k!r} (put the key in a file: api_key_file)" for k in sorted(inline, key=str)]
    values = parse_section(CanarySettings, {k: v for k, v in raw.items() if k not in inline}, Where("canary"), errors)
    if errors:
        raise ConfigError(errors)
    cfg = apply(base or CanarySettings(), values)
    if validate:
        check(cfg)
    return cfg


def check(cfg: CanarySettings) -> None:
    errors = []
    if cfg.strategy == "pressure" and not cfg.allow_pressure:
        errors.append(
            "canary.strategy pressure evicts users' GPU cache: it needs allow_pressure: true "
            "(--canary.allow-pressure / --allow-pressure), meant for staging"
        )
    if cfg.wait_initial > cfg.wait_max:
        errors.append("canary.wait_initial must not exceed wait_max")
    if cfg.min_samples > cfg.max_samples:
        errors.append("canary.min_samples must not exceed max_samples")
    if errors:
        raise ConfigError(errors)


def _check_with(settings: CanarySettings, config: Config) -> None:
    """The canary's rules, and those that need the exporter's config (one control target, one target)."""
    errors = []
    try:
        check(settings)
    except ConfigError as e:
        errors += e.errors
    if settings.enabled and settings.control_target and len(config.targets) > 1:
        errors.append("canary.control_target: needs exactly one target")
    if errors:
        raise ConfigError(errors)


register_section(
    Section("canary", CanarySettings, lambda raw, base: from_mapping(raw, base, validate=False), _check_with)
)

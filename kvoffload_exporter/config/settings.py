"""The exporter's settings as frozen dataclasses declared once (kvoffload_exporter.config.schema): YAML file, flags and
`KVOFFLOAD_*` environment variables all validate through the same field declarations."""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any
from urllib.parse import quote, unquote, urlsplit, urlunsplit

from kvoffload_exporter import redact
from kvoffload_exporter.config.credentials import Auth, BasicAuth, BearerToken, target_auth
from kvoffload_exporter.config.limits import Limits, limits_from_mapping
from kvoffload_exporter.config.schema import (
    ConfigError,
    Where,
    apply,
    boolean,
    choice,
    duration,
    integer,
    number,
    parse_duration,
    parse_section,
    seconds_text,
    setting,
    string,
)
from kvoffload_exporter.config.sections import SECTIONS, check_sections, default_sections, parse_sections, section_value
from kvoffload_exporter.config.values import (
    allow_regex,
    base_url,
    extra_urls,
    file_path,
    format_duration,
    http_path,
    listen_address,
    split_listen,
    url_list,
)
from kvoffload_exporter.redact import Scrubber, redact_url

log = logging.getLogger("kvoffload.config")
DEFAULT_LISTEN = "127.0.0.1:9466"
MIN_CONNECTIONS = 8
"""Fewer connection slots serve nothing: the reserve for addresses answered before takes two (or an
eighth), and the shared rest must hold a scrape and a `/probe` or two."""
MAX_POLLS_PER_WINDOW = 100_000  # points of history per target: bounds memory


@dataclass(frozen=True)
class TargetConfig:
    url: str = setting(
        "",
        base_url,
        "base URL of the vLLM OpenAI server, e.g. http://127.0.0.1:8000; user:password@ in it is basic auth, "
        "but in `--target` every local user sees it in `ps`: use username + password_file",
        env=False,
    )
    name: str = setting("", string(), "`target` label (default: host:port)", env=False)
    pid: int | None = setting(None, integer(1), "vLLM API-server PID for memory gauges", env=False)
    pidfile: str | None = setting(None, string(), "file holding that PID", env=False)
    port: int | None = setting(None, integer(1, 65535), "find the vLLM process by this port", env=False)
    tier_bytes: float | None = setting(None, number(0, lo_open=True), "configured CPU-tier bytes", env=False)
    username: str | None = setting(None, string(), "basic auth user (with password_file)", env=False)
    password_file: str | None = setting(
        None, file_path, "file holding the basic auth password (kept out of `ps`, the config and the URL)", env=False
    )
    bearer_token_file: str | None = setting(None, file_path, "file holding a bearer token", env=False)
    extra_metrics_urls: tuple[str, ...] = setting(
        (),
        extra_urls,
        "the same backend's other /metrics endpoints (full URLs), read with vLLM's: KVBM, LMCache MP server",
        env=False,
    )
    auth: Auth | None = field(default=None, repr=False)  # from userinfo or the *_file keys; never shown
    extra_auth: tuple[tuple[str, str] | None, ...] = field(default=(), repr=False)  # extra URLs' userinfo
    limits: Limits | None = None  # `limits:` of this target (kvoffload_exporter.config.limits); None: Config.limits

    @property
    def label(self) -> str:
        return self.name or (urlsplit(self.url).netloc.rpartition("@")[2] or self.url)

    @property
    def local_port(self) -> int | None:
        """Port to find the vLLM process by: configured, else the URL's port when it is on this host."""
        if self.port:
            return self.port
        parts = urlsplit(self.url)
        if parts.hostname in ("127.0.0.1", "localhost", "::1"):
            return parts.port or (443 if parts.scheme == "https" else 80)
        return None

    def headers(self) -> dict[str, str]:
        return self.auth.header() if self.auth else {}

    def source_auth(self) -> tuple[str, str] | str | None:
        """`auth` as sources.vllm_http takes it: (user, password) quoted as URL userinfo is, or a token."""
        if isinstance(self.auth, BearerToken):
            return self.auth.token
        if isinstance(self.auth, BasicAuth):
            return quote(self.auth.username, safe=""), quote(self.auth.password, safe="")
        return None

    def scrubber(self) -> Scrubber:
        """What removes this target's own credentials from whatever it answers (labels, errors, version):
        a target that echoes the `Authorization` header it receives must not export it."""
        pairs = [(unquote(u), unquote(p)) for u, p in filter(None, self.extra_auth)]
        if isinstance(self.auth, BasicAuth):
            pairs.append((self.auth.username, self.auth.password))
        token = self.auth.token if isinstance(self.auth, BearerToken) else None
        return Scrubber.for_credentials(self.url, pairs, token)


@dataclass(frozen=True)
class Config:
    targets: tuple[TargetConfig, ...] = ()
    listen: str = setting(
        DEFAULT_LISTEN,
        listen_address,
        "listen address",
        flag="--web.listen-address",
        old="--listen",
        demo_flag=True,  # demo offers it as serve spells it
        metavar="HOST:PORT",
    )
    telemetry_path: str = setting(
        "/metrics", http_path, "path of the metrics endpoint", flag="--web.telemetry-path", metavar="PATH"
    )
    poll_interval: float = setting(
        5.0,
        duration(at_least=0.01),
        "seconds between polls of each target",
        flag="--poll.interval",
        old="--poll-interval",
        demo_flag=True,
        metavar="SECONDS",
    )
    window: float = setting(
        300.0,
        duration(),
        "sliding window for ratios and state",
        flag="--state.window",
        old="--window",
        demo_flag=True,
        metavar="DURATION",
    )
    timeout: float = setting(
        3.0,
        duration(),
        "per-poll timeout",
        flag="--poll.timeout",
        old="--timeout",
        demo_flag=True,
        metavar="SECONDS",
    )
    max_body_bytes: int = setting(16 * 1024 * 1024, integer(1024, 1 << 31), "cap on one /metrics body")
    host_enabled: bool = setting(
        True,
        boolean,
        "the host-memory collector",
        key="host.enabled",
        flag="--[no-]collector.host",
        old="--no-host",
        demo_flag=True,
        action="switch",
    )
    proc_root: str = setting("/proc", file_path, "procfs root", key="host.proc_root")
    cgroup_root: str = setting("/sys/fs/cgroup", file_path, "cgroup fs root", key="host.cgroup_root")
    cgroup: str = setting("auto", choice("auto", "self", "off"), "whose cgroup to read", key="host.cgroup")
    gpu_enabled: bool = setting(
        True,
        boolean,
        "the NVML GPU collector",
        key="gpu.enabled",
        flag="--[no-]collector.gpu",
        old="--no-gpu",
        demo_flag=True,
        action="switch",
    )
    sections: tuple[tuple[str, object], ...] = field(default_factory=default_sections)  # plugins' settings
    limits: Limits = field(
        default_factory=Limits
    )  # per-target caps (kvoffload_exporter.config.limits); targets may override
    max_concurrent_polls: int = setting(64, integer(1), "polls in flight at once; the rest wait for a slot")
    event_loop: str = setting(
        "asyncio",
        choice("asyncio", "uvloop", "auto"),
        "the event loop: asyncio's own, uvloop (pip install 'kvoffload-exporter[uvloop]'), or auto (uvloop where "
        "it is installed); changes only on restart",
        flag="--runtime.event-loop",
        metavar="LOOP",
    )
    probe_allow: tuple[str, ...] = setting(
        (), url_list, "/probe targets allowed besides the configured ones: exact URLs", key="probe.allow", env=False
    )
    probe_allow_regex: str | None = setting(
        None, allow_regex, "... or URLs this regex matches in full", key="probe.allow_regex"
    )
    probe_idle_ttl: float = setting(
        600.0, duration(), "a probed target's history is dropped after this long unprobed", key="probe.idle_ttl"
    )
    probe_max_targets: int = setting(
        1000, integer(1), "probed targets kept at most; the least recently probed goes first", key="probe.max_targets"
    )
    probe_max_concurrent_polls: int = setting(
        16,
        integer(1),
        "/probe polls in flight at once (apart from the configured targets' slots)",
        key="probe.max_concurrent_polls",
    )
    web_max_connections: int = setting(
        256,
        integer(MIN_CONNECTIONS, 100_000),
        "client connections open at once; more are closed at once (counted)",
        key="web.max_connections",
    )
    web_header_timeout: float = setting(
        10.0,
        duration(),
        "a client must send its request line and headers (and finish TLS) within this",
        key="web.header_timeout",
    )

    def __getattr__(self, name: str) -> Any:
        """A registered plugin section's settings (`cfg.canary`); its defaults when the file had none."""
        return section_value(self.__dict__.get("sections", ()), name)

    def with_section(self, key: str, value: object) -> Config:
        """This config with plugin section `key` replaced by `value`."""
        return replace(self, sections=(*((k, v) for k, v in self.sections if k != key), (key, value)))

    @property
    def window_label(self) -> str:
        return format_duration(self.window)

    @property
    def history_len(self) -> int:
        return int(self.window / max(self.poll_interval, 0.05)) + 3

    @property
    def listen_host_port(self) -> tuple[str, int]:
        return split_listen(self.listen)


def positive_duration(v: object) -> float:
    """parse_duration, refusing zero: poll intervals, windows and timeouts must be > 0."""
    seconds = parse_duration(v)
    if seconds <= 0:
        raise ValueError(f"must be > 0, got {v!r}")
    return seconds


def _finish_target(t: TargetConfig, where: str, errors: list[str]) -> TargetConfig:
    """Userinfo becomes auth (and leaves the URL); a trailing /metrics is the scrape path, not the base."""
    parts = urlsplit(t.url)
    userinfo, _, hostport = parts.netloc.rpartition("@")
    path = parts.path.rstrip("/")
    url = urlunsplit((parts.scheme, hostport, path, "", ""))
    if path.endswith("/metrics"):
        url, path = url[: -len("/metrics")], path[: -len("/metrics")]
        log.warning("target %s: the URL ends in /metrics; using %s as the base URL", redact_url(t.url), url)
    if path.endswith("/v1"):  # the OpenAI base URL, as clients know it: vLLM serves /metrics at its root
        url = url[: -len("/v1")]
        log.warning("target %s: the URL ends in /v1; using %s as the base URL", redact_url(t.url), url)
    auth = target_auth(userinfo, t.username, t.password_file, t.bearer_token_file, where, errors)
    extras = [urlsplit(u) for u in t.extra_metrics_urls]  # userinfo leaves each URL, as for the target's
    for e in extras:
        if e.password and redact.too_short(unquote(e.password)):
            errors.append(
                f"{where} password in an extra_metrics_urls url has {len(unquote(e.password))} characters, "
                f"fewer than {redact.MIN_SECRET}: too short to be removed safely from what the target answers"
            )
    return replace(
        t,
        url=url,
        auth=auth,
        extra_metrics_urls=tuple(e._replace(netloc=e.netloc.rpartition("@")[2]).geturl() for e in extras),
        extra_auth=tuple((e.username, e.password or "") if e.username is not None else None for e in extras),
    )


def _target(raw: object, where: Where, errors: list[str], limits: Limits) -> TargetConfig | None:
    if isinstance(raw, str):
        raw = {"url": raw}
    if not isinstance(raw, Mapping):
        errors.append(f"{where.section}: must be a URL or a mapping")
        return None
    n = len(errors)
    if "url" not in raw:
        errors.append(f"{where.section}: url is required")
    values = parse_section(TargetConfig, raw, where, errors, extra=("limits",))
    if "limits" in raw:  # on top of the global limits (kvoffload_exporter.config.limits validates them)
        values["limits"] = limits_from_mapping(raw["limits"], limits, f"{where.section}.limits", errors)
    if len(errors) > n:
        return None
    return _finish_target(apply(TargetConfig(), values), f"{where.section}:", errors)


def parse_targets(
    raw: object, errors: list[str], where: Where | None = None, limits: Limits | None = None
) -> tuple[TargetConfig, ...]:
    """`targets:` (a list, or one URL as shorthand) or the --target flags (`where` names them)."""
    if isinstance(raw, str):
        raw = [raw]
    if not isinstance(raw, list):
        errors.append("targets: must be a list")
        return ()
    parsed = [
        _target(t, where or Where(f"targets[{i}]", dotted=False), errors, limits or Limits()) for i, t in enumerate(raw)
    ]
    return tuple(t for t in parsed if t)


def from_mapping(raw: object, base: Config | None = None, validate: bool = True) -> Config:
    """Build a Config from parsed YAML. Raises ConfigError listing every problem.

    `validate=False` leaves the cross-field checks to the caller (flags may still change the values)."""
    cfg = base or Config()
    if raw is None:
        raw = {}
    if not isinstance(raw, Mapping):
        raise ConfigError(["top level must be a mapping"])
    errors: list[str] = []
    changes = parse_section(Config, raw, Where(), errors, extra=("targets", "limits", *SECTIONS))
    limits = limits_from_mapping(raw.get("limits"), cfg.limits, "limits", errors)
    changes["limits"] = limits
    if "targets" in raw:
        changes["targets"] = parse_targets(raw["targets"], errors, limits=limits)
    sections = parse_sections(raw, cfg, errors)
    if errors:
        raise ConfigError(errors)
    cfg = replace(apply(cfg, changes), sections=sections)
    if validate:
        check(cfg)
    return cfg


def check(cfg: Config) -> None:
    """Cross-field checks that hold however the config was built."""
    errors: list[str] = []
    seen: set[str] = set()
    dups: set[str] = set()
    for t in cfg.targets:  # O(n): 10,000 targets check in milliseconds
        (dups if t.label in seen else seen).add(t.label)
    for dup in sorted(dups):
        errors.append(f"targets: duplicate target name {dup!r} (set `name`)")
    poll = f"poll interval {seconds_text(cfg.poll_interval)}; a number without a unit is seconds"
    if cfg.timeout > cfg.poll_interval * 10:
        errors.append(f"timeout: {seconds_text(cfg.timeout)} must not exceed 10 poll intervals ({poll})")
    if cfg.window < cfg.poll_interval * 2:
        errors.append(f"window: {seconds_text(cfg.window)} must cover at least two poll intervals ({poll})")
    if cfg.window > cfg.poll_interval * MAX_POLLS_PER_WINDOW:  # history is kept per target
        errors.append(f"window: must not cover more than {MAX_POLLS_PER_WINDOW} poll intervals")
    if cfg.telemetry_path in ("/", "/healthz", "/probe", "/-/healthy", "/-/ready", "/-/reload"):
        errors.append(f"telemetry_path: {cfg.telemetry_path} is taken by the exporter itself")
    check_sections(cfg, errors)
    if errors:
        raise ConfigError(errors)


MAX_CONFIG_BYTES = 8 << 20  # 10,000 targets with auth and limits: ~2 MB


def load_file(path: str, base: Config | None = None, validate: bool = True) -> Config:
    """Parse `path` (capped at MAX_CONFIG_BYTES, YAML aliases refused: config.yamlsafe) into a Config."""
    from kvoffload_exporter.config.yamlsafe import YamlError, load  # imported here: only needed with --config.file

    try:
        raw = load(path, MAX_CONFIG_BYTES, "config")
    except YamlError as e:
        raise ConfigError([str(e)]) from None
    return from_mapping(raw, base, validate)


def environ() -> Mapping[str, str]:
    """The process environment (a seam for tests)."""
    return os.environ


__all__ = [
    "Auth",
    "BasicAuth",
    "BearerToken",
    "Config",
    "ConfigError",
    "TargetConfig",
    "check",
    "format_duration",
    "from_mapping",
    "load_file",
    "parse_duration",
    "positive_duration",
    "redact_url",
    "split_listen",
]

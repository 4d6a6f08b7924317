"""Settings from flags and/or a YAML file → frozen `Config`, validated strictly with every error listed."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any
from urllib.parse import urlsplit

from exporter.limits import Limits, limits_from_mapping

DEFAULT_LISTEN = "127.0.0.1:9466"


class ConfigError(ValueError):
    """Invalid configuration; `errors` lists every problem found, not just the first."""

    def __init__(self, errors: list[str]):
        super().__init__("invalid configuration:\n  - " + "\n  - ".join(errors))
        self.errors = errors


@dataclass(frozen=True)
class TargetConfig:
    url: str  # base URL of the vLLM OpenAI server, e.g. http://127.0.0.1:8000
    name: str = ""  # `target` label; defaults to host:port
    pid: int | None = None  # vLLM API-server PID for memory gauges
    pidfile: str | None = None
    port: int | None = None  # find the vLLM process by its listening port (default: the URL's port)
    tier_bytes: float | None = None  # configured CPU-tier bytes when vLLM does not export them
    limits: Limits | None = None  # None: Config.limits

    @property
    def label(self) -> str:
        return self.name or (urlsplit(self.url).netloc.rpartition("@")[2] or self.url)  # never the userinfo

    @property
    def local_port(self) -> int | None:
        """Port to find the vLLM process by: configured, else the URL's port when it is on this host."""
        if self.port:
            return self.port
        parts = urlsplit(self.url)
        if parts.hostname in ("127.0.0.1", "localhost", "::1"):
            return parts.port or (443 if parts.scheme == "https" else 80)
        return None


@dataclass(frozen=True)
class Config:
    targets: tuple[TargetConfig, ...] = ()
    listen: str = DEFAULT_LISTEN
    poll_interval: float = 5.0
    window: float = 300.0
    timeout: float = 3.0
    max_body_bytes: int = 16 * 1024 * 1024
    host_enabled: bool = True
    proc_root: str = "/proc"
    cgroup_root: str = "/sys/fs/cgroup"
    cgroup: str = "auto"  # auto: the vLLM process's cgroup | self: cgroup_root as is | off
    gpu_enabled: bool = True
    canary: Mapping[str, Any] = field(default_factory=dict)  # validated by exporter.canary when used
    limits: Limits = field(default_factory=Limits)  # per-target caps (exporter.limits); targets may override
    max_concurrent_polls: int = 64  # polls in flight at once; the rest wait for a slot
    telemetry_path: str = "/metrics"
    probe_allow: tuple[str, ...] = ()  # /probe targets allowed besides the configured ones: exact URLs
    probe_allow_regex: str | None = None  # ... or URLs this regex matches in full
    probe_idle_ttl: float = 600.0  # a probed target's history is dropped after this long unprobed

    @property
    def window_label(self) -> str:
        return format_duration(self.window)

    @property
    def history_len(self) -> int:
        return int(self.window / max(self.poll_interval, 0.05)) + 3

    @property
    def listen_host_port(self) -> tuple[str, int]:
        return split_listen(self.listen)


_DUR = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h)?\s*$")
_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, None: 1.0}


def parse_duration(v: Any) -> float:
    """5, 2.5, "500ms", "30s", "5m", "1h" → seconds."""
    if isinstance(v, bool):
        raise ValueError(f"not a duration: {v!r}")
    if isinstance(v, (int, float)):
        return float(v)
    m = _DUR.match(str(v))
    if not m:
        raise ValueError(f"not a duration: {v!r} (use e.g. 5, 500ms, 30s, 5m, 1h)")
    return float(m.group(1)) * _UNITS[m.group(2)]


def positive_duration(v: Any) -> float:
    """parse_duration, refusing zero: poll intervals, windows and timeouts must be > 0."""
    seconds = parse_duration(v)
    if seconds <= 0:
        raise ValueError(f"must be > 0, got {v!r}")
    return seconds


def format_duration(seconds: float) -> str:
    """Prometheus-style label for a window: 300 → "5m", 90 → "90s"."""
    s = int(round(seconds))
    if s and s % 3600 == 0:
        return f"{s // 3600}h"
    if s and s % 60 == 0:
        return f"{s // 60}m"
    return f"{s}s"


def split_listen(listen: str) -> tuple[str, int]:
    host, sep, port = listen.rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) < 65536:
        raise ValueError(f"listen must be HOST:PORT, got {listen!r}")
    return (host.strip("[]") or "0.0.0.0"), int(port)


_TOP_KEYS = {
    "targets",
    "listen",
    "poll_interval",
    "window",
    "timeout",
    "max_body_bytes",
    "host",
    "gpu",
    "canary",
    "limits",
}
_TARGET_KEYS = {"url", "name", "pid", "pidfile", "port", "tier_bytes", "limits"}
_TOP_KEYS |= {"max_concurrent_polls", "telemetry_path", "probe"}


def _check_url(url: Any, where: str, errors: list[str]) -> None:
    if not isinstance(url, str) or not url:
        errors.append(f"{where}: url is required")
        return
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        errors.append(f"{where}: url must be http(s)://HOST:PORT, got {url!r}")


def _target(raw: Any, where: str, errors: list[str], limits: Limits | None = None) -> TargetConfig | None:
    if isinstance(raw, str):
        raw = {"url": raw}
    if not isinstance(raw, Mapping):
        errors.append(f"{where}: must be a URL or a mapping")
        return None
    for k in sorted(set(raw) - _TARGET_KEYS):
        errors.append(f"{where}: unknown key {k!r}")
    _check_url(raw.get("url"), where, errors)
    for k in ("pid", "port"):
        v = raw.get(k)
        if v is not None and (not isinstance(v, int) or isinstance(v, bool) or v <= 0):
            errors.append(f"{where}: {k} must be a positive integer")
    for k in ("name", "pidfile"):
        v = raw.get(k)
        if v is not None and (not isinstance(v, str) or not v):
            errors.append(f"{where}: {k} must be a non-empty string")
    tb = raw.get("tier_bytes")
    if tb is not None and (isinstance(tb, bool) or not isinstance(tb, (int, float)) or tb <= 0):
        errors.append(f"{where}: tier_bytes must be a positive number")
    try:
        return TargetConfig(
            url=str(raw.get("url", "")).rstrip("/"),
            name=str(raw.get("name") or ""),
            pid=raw.get("pid"),
            pidfile=raw.get("pidfile"),
            port=raw.get("port"),
            tier_bytes=float(tb) if isinstance(tb, (int, float)) else None,
            limits=limits_from_mapping(raw["limits"], limits or Limits(), f"{where}.limits", errors)
            if "limits" in raw
            else None,
        )
    except (TypeError, ValueError) as e:
        errors.append(f"{where}: {e}")
        return None


def from_mapping(raw: Any, base: Config | None = None) -> Config:
    """Build a Config from parsed YAML. Raises ConfigError listing every problem."""
    errors: list[str] = []
    cfg = base or Config()
    if raw is None:
        raw = {}
    if not isinstance(raw, Mapping):
        raise ConfigError(["top level must be a mapping"])
    for k in sorted(set(raw) - _TOP_KEYS):
        errors.append(f"unknown key {k!r}")
    changes: dict[str, Any] = {}
    limits = limits_from_mapping(raw.get("limits"), cfg.limits, "limits", errors)
    changes["limits"] = limits
    if "targets" in raw:
        ts = raw["targets"]
        if not isinstance(ts, list):
            errors.append("targets: must be a list")
        else:
            parsed = [_target(t, f"targets[{i}]", errors, limits) for i, t in enumerate(ts)]
            changes["targets"] = tuple(t for t in parsed if t)
    for key in ("poll_interval", "window", "timeout"):
        if key in raw:
            try:
                changes[key] = positive_duration(raw[key])
            except ValueError as e:
                errors.append(f"{key}: {e}")
    if "listen" in raw:
        try:
            split_listen(str(raw["listen"]))
            changes["listen"] = str(raw["listen"])
        except ValueError as e:
            errors.append(str(e))
    if "max_body_bytes" in raw:
        v = raw["max_body_bytes"]
        if not isinstance(v, int) or isinstance(v, bool) or v < 1024:
            errors.append("max_body_bytes: must be an integer >= 1024")
        else:
            changes["max_body_bytes"] = v
    for section, keys in (
        (
            "host",
            {"enabled": "host_enabled", "proc_root": "proc_root", "cgroup_root": "cgroup_root", "cgroup": "cgroup"},
        ),
        ("gpu", {"enabled": "gpu_enabled"}),
    ):
        sec = raw.get(section)
        if sec is None:
            continue
        if not isinstance(sec, Mapping):
            errors.append(f"{section}: must be a mapping")
            continue
        for k, v in sec.items():
            if k not in keys:
                errors.append(f"{section}: unknown key {k!r}")
            elif k == "enabled" and not isinstance(v, bool):
                errors.append(f"{section}.enabled: must be true or false")
            elif k == "cgroup" and v not in ("auto", "self", "off"):
                errors.append(f"{section}.cgroup: must be auto, self or off, got {v!r}")
            elif k.endswith("_root") and (not isinstance(v, str) or not v):
                errors.append(f"{section}.{k}: must be a path")
            else:
                changes[keys[k]] = v
    _serving(raw, changes, errors)
    if "canary" in raw:
        if not isinstance(raw["canary"], Mapping):
            errors.append("canary: must be a mapping")
        else:
            changes["canary"] = dict(raw["canary"])
    if errors:
        raise ConfigError(errors)
    cfg = replace(cfg, **changes)
    check(cfg)
    return cfg


def _serving(raw: Mapping[str, Any], changes: dict[str, Any], errors: list[str]) -> None:
    """max_concurrent_polls, telemetry_path and `probe: {allow, allow_regex, idle_ttl}`."""
    v = raw.get("max_concurrent_polls", 1)
    if not isinstance(v, int) or isinstance(v, bool) or v < 1:
        errors.append("max_concurrent_polls: must be an integer >= 1")
    elif "max_concurrent_polls" in raw:
        changes["max_concurrent_polls"] = v
    path = raw.get("telemetry_path", "/metrics")
    if not isinstance(path, str) or not path.startswith("/") or path in ("/", "/probe", "/healthz"):
        errors.append("telemetry_path: must be a path like /metrics (not /, /probe or /healthz)")
    elif "telemetry_path" in raw:
        changes["telemetry_path"] = path
    _probe(raw.get("probe", {}), changes, errors)


def _probe(probe: object, changes: dict[str, Any], errors: list[str]) -> None:
    if not isinstance(probe, Mapping) or set(probe) - {"allow", "allow_regex", "idle_ttl"}:
        errors.append("probe: must be a mapping with allow, allow_regex and/or idle_ttl")
        return
    allow = probe.get("allow", [])
    if not isinstance(allow, list) or not all(isinstance(u, str) for u in allow):
        errors.append("probe.allow: must be a list of URLs")
    elif "allow" in probe:
        for i, u in enumerate(allow):
            _check_url(u, f"probe.allow[{i}]", errors)
        changes["probe_allow"] = tuple(u.rstrip("/") for u in allow)
    if "allow_regex" in probe:
        try:
            changes["probe_allow_regex"] = re.compile(probe["allow_regex"]).pattern
        except (re.error, TypeError) as e:
            errors.append(f"probe.allow_regex: not a regular expression: {e}")
    if "idle_ttl" in probe:
        try:
            changes["probe_idle_ttl"] = positive_duration(probe["idle_ttl"])
        except ValueError as e:
            errors.append(f"probe.idle_ttl: {e}")


def check(cfg: Config) -> None:
    """Cross-field checks that hold however the config was built."""
    errors: list[str] = []
    labels = [t.label for t in cfg.targets]
    for dup in sorted({lbl for lbl in labels if labels.count(lbl) > 1}):
        errors.append(f"targets: duplicate target name {dup!r} (set `name`)")
    if cfg.timeout > cfg.poll_interval * 10:
        errors.append("timeout: must not exceed 10 poll intervals")
    if cfg.window < cfg.poll_interval * 2:
        errors.append("window: must cover at least two poll intervals")
    if errors:
        raise ConfigError(errors)


def load_file(path: str, base: Config | None = None) -> Config:
    import yaml  # imported here: only needed with --config

    try:
        with open(path, encoding="utf-8") as f:
            raw = yaml.safe_load(f)
    except OSError as e:
        raise ConfigError([f"cannot read {path}: {e.strerror}"]) from None
    except yaml.YAMLError as e:
        raise ConfigError([f"{path}: not valid YAML: {e}"]) from None
    except UnicodeDecodeError:
        raise ConfigError([f"{path}: not UTF-8 text"]) from None
    return from_mapping(raw, base)

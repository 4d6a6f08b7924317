"""`--web.config.file` in the Prometheus exporter-toolkit format: TLS and basic auth for every endpoint.

The same YAML Prometheus exporters read (https://github.com/prometheus/exporter-toolkit, docs/web-
configuration.md), so one file and one bcrypt tool serve the whole fleet:

    tls_server_config:
      cert_file: server.crt          # relative paths are relative to this file, as in the toolkit
      key_file: server.key           # not encrypted: a pass phrase is never asked for
      client_auth_type: RequireAndVerifyClientCert   # optional
      client_ca_file: ca.crt
      min_version: TLS12             # optional
    basic_auth_users:
      prometheus: $2y$10$...         # bcrypt hash (htpasswd -nBC 10 "" | tr -d ':\\n')

An invalid file is refused with one line (WebConfigError) that names the file and the line, never what
the file holds: the path may be a symlink to a secret. The password checks live in kvoffload_exporter.server.webauth.
"""

from __future__ import annotations

import difflib
import logging
import os
import re
import ssl
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, NoReturn

if TYPE_CHECKING:
    pass

log = logging.getLogger("kvoffload")

MAX_WEB_CONFIG_BYTES = 256 * 1024
MAX_PEM_BYTES = 1 << 20  # a certificate chain or CA bundle; a key is a few KB
_TLS_KEYS = ("cert_file", "key_file", "client_auth_type", "client_ca_file", "min_version", "max_version")
_TOP_KEYS = ("tls_server_config", "basic_auth_users", "http_server_config")
_HTTP_KEYS = ("http2",)  # toolkit's `headers` is not supported: refused rather than silently ignored
_CLIENT_AUTH = {
    "NoClientCert": ssl.CERT_NONE,
    "VerifyClientCertIfGiven": ssl.CERT_OPTIONAL,
    "RequireAndVerifyClientCert": ssl.CERT_REQUIRED,
}
_UNSUPPORTED_CLIENT_AUTH = ("RequestClientCert", "RequireAnyClientCert")  # unverified certs: Python ssl cannot
_VERSIONS = {
    "TLS10": ssl.TLSVersion.TLSv1,
    "TLS11": ssl.TLSVersion.TLSv1_1,
    "TLS12": ssl.TLSVersion.TLSv1_2,
    "TLS13": ssl.TLSVersion.TLSv1_3,
}
_BCRYPT = re.compile(r"\$2[aby]\$(\d\d)\$[./A-Za-z0-9]{53}")
_SHOWABLE_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,39}")


class WebConfigError(ValueError):
    """The web configuration file cannot be used; the message is one line naming the problem."""


@dataclass(frozen=True)
class WebConfig:
    ssl_context: ssl.SSLContext | None = None
    users: Mapping[str, bytes] = field(default_factory=dict)  # user -> bcrypt hash


class _Where:
    """The file and the line of each key: what every error names instead of the file's content."""

    def __init__(self, name: str, lines: Mapping[tuple[str, ...], int]) -> None:
        self.name, self.lines = name, lines

    def fail(self, problem: str, *path: str) -> NoReturn:
        while path and path not in self.lines:
            path = path[:-1]
        line = f" line {self.lines[path]}" if path else ""
        raise WebConfigError(f"{self.name}{line}: {problem}")

    def unknown(self, key: object, known: tuple[str, ...], *path: str) -> NoReturn:
        k = str(key)
        shown = f" {k!r}" if isinstance(key, str) and _SHOWABLE_KEY.fullmatch(k) else ""
        near = difflib.get_close_matches(k, known, n=1, cutoff=0.6)
        hint = f" (did you mean {near[0]!r}?)" if near else f" (known: {', '.join(known)})"
        self.fail(f"unknown key{shown}{hint}", *path, k)


def load(path: str) -> WebConfig:
    """Read (capped, YAML aliases refused) and validate the file; raises WebConfigError with one line."""
    from kvoffload_exporter.config.yamlsafe import YamlError, compose, construct, key_lines, read_capped

    name = f"web config {path}"
    try:
        node = compose(read_capped(path, MAX_WEB_CONFIG_BYTES, "web config"), name)
        raw = construct(node, name)
        lines = key_lines(node)
    except YamlError as e:
        raise WebConfigError(str(e)) from None
    except RecursionError:  # key_lines walks the tree: a 999-deep file
        raise WebConfigError(f"{name}: nested too deeply") from None
    try:
        cfg = from_mapping(raw, os.path.dirname(os.path.abspath(path)), name, lines)
    except RecursionError:
        raise WebConfigError(f"{name}: nested too deeply") from None
    if cfg.users and cfg.ssl_context is None:
        log.warning("%s: basic auth without tls_server_config: passwords cross the network in clear text", name)
    return cfg


def from_mapping(
    raw: object, base_dir: str, where: str = "web config", lines: Mapping[tuple[str, ...], int] | None = None
) -> WebConfig:
    w = _Where(where, lines or {})
    if raw is None:
        raw = {}
    if not isinstance(raw, Mapping):
        w.fail("top level must be a mapping")
    for k in raw:
        if k not in _TOP_KEYS:
            w.unknown(k, _TOP_KEYS)
    _http(raw.get("http_server_config"), w)
    tls = raw.get("tls_server_config")
    ctx = _ssl_context(tls, base_dir, w) if tls is not None else None
    return WebConfig(ssl_context=ctx, users=_users(raw.get("basic_auth_users"), w))


def _http(raw: object, w: _Where) -> None:
    if raw is None:
        return
    if not isinstance(raw, Mapping):
        w.fail("http_server_config must be a mapping", "http_server_config")
    for k, v in raw.items():
        if k not in _HTTP_KEYS:
            w.unknown(k, _HTTP_KEYS, "http_server_config")
        if not isinstance(v, bool):
            w.fail(f"http_server_config.{k} must be true or false", "http_server_config", k)


def _path(tls: Mapping[str, object], key: str, base_dir: str, w: _Where) -> str:
    v = tls.get(key)
    if not isinstance(v, str) or not v:
        w.fail(f"tls_server_config.{key} is required (a file name)", "tls_server_config", key)
    p = v if os.path.isabs(v) else os.path.join(base_dir, v)
    if not os.path.isfile(p):  # a FIFO or /dev/zero would block or never end the read
        w.fail(f"tls_server_config.{key}: no such file (or not a regular file)", "tls_server_config", key)
    if os.path.getsize(p) > MAX_PEM_BYTES:
        w.fail(f"tls_server_config.{key}: over {MAX_PEM_BYTES:,} bytes", "tls_server_config", key)
    return p


def _choice(tls: Mapping[str, object], key: str, allowed: tuple[str, ...], w: _Where) -> str | None:
    v = tls.get(key)
    if v is None:
        return None
    if not isinstance(v, str) or v not in allowed:
        w.fail(f"tls_server_config.{key} must be one of {', '.join(allowed)}", "tls_server_config", key)
    return v


def _ssl_context(tls: object, base_dir: str, w: _Where) -> ssl.SSLContext:
    if not isinstance(tls, Mapping):
        w.fail("tls_server_config must be a mapping", "tls_server_config")
    for k in tls:
        if k not in _TLS_KEYS:
            w.unknown(k, _TLS_KEYS, "tls_server_config")
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    lo = _choice(tls, "min_version", tuple(_VERSIONS), w)
    hi = _choice(tls, "max_version", tuple(_VERSIONS), w)
    ctx.minimum_version = _VERSIONS[lo] if lo else ssl.TLSVersion.TLSv1_2
    if hi:
        if _VERSIONS[hi] < ctx.minimum_version:
            w.fail(f"tls_server_config.max_version {hi} is below min_version {lo or 'TLS12'}", "tls_server_config")
        ctx.maximum_version = _VERSIONS[hi]
    load_key_pair(ctx, _path(tls, "cert_file", base_dir, w), _path(tls, "key_file", base_dir, w), w.name)
    mode = tls.get("client_auth_type", "NoClientCert")
    if isinstance(mode, str) and mode in _UNSUPPORTED_CLIENT_AUTH:
        w.fail(
            f"tls_server_config.client_auth_type {mode} (unverified client certificates) is not supported: "
            "use VerifyClientCertIfGiven or RequireAndVerifyClientCert",
            "tls_server_config",
            "client_auth_type",
        )
    mode = _choice(tls, "client_auth_type", tuple(_CLIENT_AUTH), w) or "NoClientCert"
    ctx.verify_mode = _CLIENT_AUTH[mode]
    if "client_ca_file" in tls or ctx.verify_mode != ssl.CERT_NONE:
        try:
            ctx.load_verify_locations(_path(tls, "client_ca_file", base_dir, w))
        except ssl.SSLError:
            w.fail("tls_server_config.client_ca_file: not a PEM CA certificate", "tls_server_config", "client_ca_file")
    return ctx


def load_key_pair(ctx: ssl.SSLContext, cert: str, key: str, where: str) -> None:
    """Certificate and key into `ctx`; an encrypted key is refused (never a pass-phrase prompt)."""

    def no_pass_phrase() -> str:
        raise WebConfigError(f"{where}: tls_server_config.key_file is encrypted: use a key without a pass phrase")

    try:
        ctx.load_cert_chain(cert, key, password=no_pass_phrase)
    except ssl.SSLError as e:
        reason = e.reason or "unreadable"
        raise WebConfigError(f"{where}: tls_server_config: cannot load certificate and key ({reason})") from None


def _users(raw: object, w: _Where) -> dict[str, bytes]:
    if raw is None:
        return {}
    if not isinstance(raw, Mapping):
        w.fail("basic_auth_users must be a mapping of user to bcrypt hash", "basic_auth_users")
    users: dict[str, bytes] = {}
    for user, h in raw.items():
        if not isinstance(user, str) or not user or ":" in user:
            w.fail("basic_auth_users: invalid user name (a string without ':')", "basic_auth_users", str(user))
        if not isinstance(h, str) or not _BCRYPT.fullmatch(h):
            # Neither the value nor its type is echoed: a plain-text password pasted here must reach no log.
            w.fail(f"basic_auth_users.{user}: not a bcrypt hash ($2a$/$2b$/$2y$, 60 chars)", "basic_auth_users", user)
        users[user] = h.encode()
    return users


__all__ = ["MAX_WEB_CONFIG_BYTES", "WebConfig", "WebConfigError", "from_mapping", "load", "load_key_pair"]

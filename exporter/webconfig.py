"""`--web.config.file` in the Prometheus exporter-toolkit format: TLS and basic auth for every endpoint.

The same YAML Prometheus exporters read (https://github.com/prometheus/exporter-toolkit, docs/web-
configuration.md), so one file and one bcrypt tool serve the whole fleet:

    tls_server_config:
      cert_file: server.crt          # relative paths are relative to this file, as in the toolkit
      key_file: server.key
      client_auth_type: RequireAndVerifyClientCert   # optional
      client_ca_file: ca.crt
      min_version: TLS12             # optional
    basic_auth_users:
      prometheus: $2y$10$...         # bcrypt hash (htpasswd -nBC 10 "" | tr -d ':\\n')

An invalid file is refused at start with one line (WebConfigError). bcrypt is slow on purpose, so
checks run in a worker thread, at most two at a time, and a verified (user, password) pair is
remembered by its SHA-256 so a scraper's every request does not cost a bcrypt round.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import hashlib
import os
import ssl
from collections.abc import Mapping
from dataclasses import dataclass, field

from aiohttp import web
from aiohttp.typedefs import Handler, Middleware

_TLS_KEYS = {"cert_file", "key_file", "client_auth_type", "client_ca_file", "min_version", "max_version"}
_TOP_KEYS = {"tls_server_config", "basic_auth_users", "http_server_config"}
_CLIENT_AUTH = {
    "NoClientCert": ssl.CERT_NONE,
    "VerifyClientCertIfGiven": ssl.CERT_OPTIONAL,
    "RequireAndVerifyClientCert": ssl.CERT_REQUIRED,
}
_UNSUPPORTED_CLIENT_AUTH = {"RequestClientCert", "RequireAnyClientCert"}  # unverified certs: Python ssl cannot
_VERSIONS = {
    "TLS10": ssl.TLSVersion.TLSv1,
    "TLS11": ssl.TLSVersion.TLSv1_1,
    "TLS12": ssl.TLSVersion.TLSv1_2,
    "TLS13": ssl.TLSVersion.TLSv1_3,
}
_BCRYPT_PREFIXES = ("$2a$", "$2b$", "$2y$")
# Checked for unknown users too, so the answer time does not tell which user names exist.
_DUMMY_HASH = b"$2b$10$iTqesFMJWz9YSd7j1eS2Xez4GcgJj5fd0VifqNgEuXKucmIG7MY/m"
_CACHE_MAX = 256


class WebConfigError(ValueError):
    """The web configuration file cannot be used; the message is one line naming the problem."""


@dataclass(frozen=True)
class WebConfig:
    ssl_context: ssl.SSLContext | None = None
    users: Mapping[str, bytes] = field(default_factory=dict)  # user -> bcrypt hash

    @property
    def middlewares(self) -> tuple[Middleware, ...]:
        return (basic_auth_middleware(self.users),) if self.users else ()


def load(path: str) -> WebConfig:
    """Read and validate the file; raises WebConfigError with one line."""
    import yaml

    try:
        with open(path, encoding="utf-8") as f:
            raw = yaml.safe_load(f)
    except OSError as e:
        raise WebConfigError(f"web config {path}: cannot read: {e.strerror}") from None
    except (yaml.YAMLError, UnicodeDecodeError) as e:
        raise WebConfigError(f"web config {path}: not valid YAML: {str(e).splitlines()[0]}") from None
    return from_mapping(raw, os.path.dirname(os.path.abspath(path)), path)


def from_mapping(raw: object, base_dir: str, where: str = "web config") -> WebConfig:
    if raw is None:
        raw = {}
    if not isinstance(raw, Mapping):
        raise WebConfigError(f"{where}: top level must be a mapping")
    unknown = sorted(set(map(str, raw)) - _TOP_KEYS)
    if unknown:
        raise WebConfigError(f"{where}: unknown key {unknown[0]!r}")
    tls = raw.get("tls_server_config")
    ctx = _ssl_context(tls, base_dir, where) if tls is not None else None
    return WebConfig(ssl_context=ctx, users=_users(raw.get("basic_auth_users"), where))


def _path(tls: Mapping[str, object], key: str, base_dir: str, where: str) -> str:
    v = tls.get(key)
    if not isinstance(v, str) or not v:
        raise WebConfigError(f"{where}: tls_server_config.{key} is required")
    p = v if os.path.isabs(v) else os.path.join(base_dir, v)
    if not os.path.isfile(p):
        raise WebConfigError(f"{where}: tls_server_config.{key}: no such file {v!r}")
    return p


def _ssl_context(tls: object, base_dir: str, where: str) -> ssl.SSLContext:
    if not isinstance(tls, Mapping):
        raise WebConfigError(f"{where}: tls_server_config must be a mapping")
    unknown = sorted(set(map(str, tls)) - _TLS_KEYS)
    if unknown:
        raise WebConfigError(f"{where}: tls_server_config: unknown or unsupported key {unknown[0]!r}")
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.minimum_version = _version(tls, "min_version", ssl.TLSVersion.TLSv1_2, where)
    if "max_version" in tls:
        ctx.maximum_version = _version(tls, "max_version", ssl.TLSVersion.TLSv1_3, where)
    try:
        ctx.load_cert_chain(_path(tls, "cert_file", base_dir, where), _path(tls, "key_file", base_dir, where))
    except ssl.SSLError as e:
        raise WebConfigError(f"{where}: tls_server_config: cannot load certificate and key: {e.reason}") from None
    mode = tls.get("client_auth_type", "NoClientCert")
    if mode in _UNSUPPORTED_CLIENT_AUTH:
        raise WebConfigError(
            f"{where}: tls_server_config.client_auth_type {mode} (unverified client certificates) is not "
            "supported: use VerifyClientCertIfGiven or RequireAndVerifyClientCert"
        )
    if mode not in _CLIENT_AUTH:
        raise WebConfigError(f"{where}: tls_server_config.client_auth_type: unknown value {mode!r}")
    ctx.verify_mode = _CLIENT_AUTH[mode]
    if "client_ca_file" in tls or ctx.verify_mode != ssl.CERT_NONE:
        try:
            ctx.load_verify_locations(_path(tls, "client_ca_file", base_dir, where))
        except ssl.SSLError as e:
            raise WebConfigError(f"{where}: tls_server_config.client_ca_file: {e.reason}") from None
    return ctx


def _version(tls: Mapping[str, object], key: str, default: ssl.TLSVersion, where: str) -> ssl.TLSVersion:
    v = tls.get(key)
    if v is None:
        return default
    if not isinstance(v, str) or v not in _VERSIONS:
        raise WebConfigError(f"{where}: tls_server_config.{key}: must be one of {', '.join(_VERSIONS)}")
    return _VERSIONS[v]


def _users(raw: object, where: str) -> dict[str, bytes]:
    if raw is None:
        return {}
    if not isinstance(raw, Mapping):
        raise WebConfigError(f"{where}: basic_auth_users must be a mapping of user to bcrypt hash")
    users: dict[str, bytes] = {}
    for user, h in raw.items():
        if not isinstance(user, str) or not user or ":" in user:
            raise WebConfigError(f"{where}: basic_auth_users: invalid user name {str(user)[:40]!r}")
        if not isinstance(h, str) or not h.startswith(_BCRYPT_PREFIXES) or len(h) != 60:
            # The hash is not echoed: a plain-text password pasted here must not reach a log.
            raise WebConfigError(f"{where}: basic_auth_users.{user}: not a bcrypt hash ($2a$/$2b$/$2y$, 60 chars)")
        users[user] = h.encode()
    return users


def _credentials(header: str) -> tuple[str, str] | None:
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "basic":
        return None
    try:
        user, sep, password = base64.b64decode(token.strip(), validate=True).decode("utf-8").partition(":")
    except (binascii.Error, UnicodeDecodeError):
        return None
    return (user, password) if sep else None


def basic_auth_middleware(users: Mapping[str, bytes]) -> Middleware:
    """401 unless the request carries one of `users` with its password (bcrypt-checked)."""
    import bcrypt

    verified: dict[tuple[str, bytes], bool] = {}  # (user, sha256(password)) -> True
    gate = asyncio.Semaphore(2)  # a flood of wrong passwords costs two threads, not the loop

    def check(user: str, password: str) -> bool:
        h = users.get(user)
        try:
            ok = bcrypt.checkpw(password.encode(), h or _DUMMY_HASH)
        except ValueError:
            ok = False
        return ok and h is not None

    @web.middleware
    async def middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
        cred = _credentials(request.headers.get("Authorization", ""))
        if cred is not None:
            key = (cred[0], hashlib.sha256(cred[1].encode()).digest())
            ok = key in verified
            if not ok:
                async with gate:
                    ok = await asyncio.to_thread(check, *cred)
                if ok:
                    if len(verified) >= _CACHE_MAX:
                        verified.clear()
                    verified[key] = True
            if ok:
                return await handler(request)
        return web.Response(
            status=401, text="Unauthorized\n", headers={"WWW-Authenticate": 'Basic realm="kvoffload-exporter"'}
        )

    return middleware

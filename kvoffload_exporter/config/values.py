"""Value checks of the settings that are not plain numbers or strings: listen address, URL paths, base
URLs and URL lists, the probe allow-regex. Each takes (value, from_text) as kvoffload_exporter.config.schema expects and
raises ValueError with the message the user sees."""

from __future__ import annotations

import ipaddress
import re
from urllib.parse import urlsplit

from kvoffload_exporter.redact import redact_url

_HOSTNAME = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9.-]{0,252})$")


def split_listen(listen: str) -> tuple[str, int]:
    """ "HOST:PORT" → (host, port); "[::1]:9466" and ":9466" (all interfaces) too."""
    host, sep, port = listen.rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) < 65536:
        raise ValueError(f"listen must be HOST:PORT with a port 0-65535, got {listen!r}")
    host = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    if host:
        try:
            ipaddress.ip_address(host)
        except ValueError:
            if not _HOSTNAME.match(host) or ":" in host:
                raise ValueError(f"listen must be HOST:PORT, {host!r} is not a host name or IP address") from None
    return (host or "0.0.0.0"), int(port)


def listen_address(v: object, text: bool) -> object:
    if isinstance(v, bool) or not isinstance(v, str):
        raise ValueError("must be HOST:PORT")
    split_listen(v)
    return v


def file_path(v: object, text: bool) -> object:
    if not isinstance(v, str) or not v:
        raise ValueError("must be a path")
    return v


_PLAIN_PATH = re.compile(r"/[A-Za-z0-9._~!$&'()*+,;=:@/-]{0,1023}")
"""A literal URL path: no `{…}` (a route template would serve the metrics at `/x/<anything>`), no `%`
escapes, spaces, `?`, `#`, backslashes or control characters."""


def http_path(v: object, text: bool) -> object:
    if not isinstance(v, str) or not v.startswith("/"):
        raise ValueError(f"must be a URL path starting with /, got {v!a}")
    if not _PLAIN_PATH.fullmatch(v):
        raise ValueError(
            f"must be a plain URL path (letters, digits and -._~!$&'()*+,;=:@/; no {{}}, %, spaces, ? or #), "
            f"got {ascii(v)[:80]}"
        )
    return v


def url_list(v: object, text: bool) -> object:
    if not isinstance(v, list):
        raise ValueError("must be a list of URLs")
    for i, u in enumerate(v):
        try:
            base_url(u, text)
        except ValueError as e:
            raise ValueError(f"[{i}] {e}") from None
    return tuple(str(u).rstrip("/") for u in v)


def extra_urls(v: object, text: bool) -> object:
    """Full URLs, used exactly as given (no /metrics is added): a path is required so none is guessed."""
    if not isinstance(v, list):
        raise ValueError("must be a list of URLs, e.g. [http://127.0.0.1:6880/metrics]")
    for i, u in enumerate(v):
        try:
            base_url(u, text)
        except ValueError as e:
            raise ValueError(f"[{i}] {str(e).replace('a base URL', 'a URL')}") from None
        if urlsplit(u).path in ("", "/"):
            raise ValueError(f"[{i}] must name the endpoint's path, e.g. http://127.0.0.1:6880/metrics")
    return tuple(v)


def allow_regex(v: object, text: bool) -> object:
    """Matched in linear time (kvoffload_exporter.saferegex); constructs that can backtrack are refused here."""
    from kvoffload_exporter.saferegex import SafeRegex, UnsafeRegex

    if not isinstance(v, str):
        raise ValueError("must be a regular expression")
    try:
        return SafeRegex(v).pattern
    except UnsafeRegex as e:
        raise ValueError(str(e)) from None


def base_url(v: object, text: bool) -> object:
    """An http(s) base URL; userinfo and a trailing /metrics are taken apart later (_finish_target)."""
    if not isinstance(v, str) or not v:
        raise ValueError("is required")
    try:
        parts = urlsplit(v)
        parts.port  # noqa: B018 - raises on a port out of range or not a number
    except ValueError:
        raise ValueError(f"must be http(s)://HOST:PORT, got {redact_url(v)!r}") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"must be http(s)://HOST:PORT, got {redact_url(v)!r}")
    if parts.query or parts.fragment:
        raise ValueError(f"must be a base URL without ?query or #fragment, got {redact_url(v)!r}")
    return v


def format_duration(seconds: float) -> str:
    """Prometheus-style label for a window: 300 → "5m", 90 → "90s"."""
    s = round(seconds)
    if s and s % 3600 == 0:
        return f"{s // 3600}h"
    if s and s % 60 == 0:
        return f"{s // 60}m"
    return f"{s}s"


__all__ = [
    "allow_regex",
    "base_url",
    "extra_urls",
    "file_path",
    "format_duration",
    "http_path",
    "listen_address",
    "split_listen",
    "url_list",
]

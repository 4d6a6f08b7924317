"""Redaction for anything that leaves the process as text (logs, pages, reports): pure, no I/O.

A target URL may carry `user:password@`; aiohttp uses it as basic auth, everything else must only
ever see the URL without it.
"""

from __future__ import annotations

from urllib.parse import urlsplit, urlunsplit

REDACTED = "<redacted>"


def redact_url(url: str) -> str:
    """`http://u:p@h:1/x?token=y` → `http://h:1/x?token=<redacted>`: userinfo dropped, query values
    masked (tokens are often passed there). Unparseable input is reduced to what cannot leak."""
    try:
        parts = urlsplit(url)
        host = parts.hostname or ""
        port = parts.port
    except ValueError:
        return REDACTED if "@" in url else url
    if "@" not in parts.netloc and not parts.query:
        return url
    netloc = f"[{host}]" if ":" in host else host
    if port is not None:
        netloc += f":{port}"
    query = "&".join(f"{kv.partition('=')[0]}={REDACTED}" for kv in parts.query.split("&") if kv)
    return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))


def redact_text(text: str, url: str) -> str:
    """Remove the userinfo of `url` from free text (an exception message that echoes the URL)."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return text
    if parts.password:
        text = text.replace(parts.password, REDACTED)
    if parts.username:
        text = text.replace(parts.username + ":", REDACTED + ":").replace(parts.username + "@", REDACTED + "@")
    return text


def origin(url: str) -> tuple[str, str, int | None]:
    """(scheme, host, port) with the scheme's default port filled in: what "same origin" compares."""
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    port = parts.port or {"http": 80, "https": 443}.get(scheme)
    return scheme, (parts.hostname or "").lower(), port

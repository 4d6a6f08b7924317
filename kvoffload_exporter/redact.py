"""Redaction for anything that leaves the process as text (logs, pages, reports): pure, no I/O.

A target URL may carry `user:password@`; aiohttp uses it as basic auth, everything else must only
ever see the URL without it.
"""

from __future__ import annotations

from collections.abc import Iterable
from urllib.parse import quote, unquote, urlsplit, urlunsplit

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


MIN_SECRET = 4
"""Shorter strings are not searched for: they would blank out ordinary text (a `1234` in every number)."""
_MIN_CORE = 8
"""A base64 run shorter than this (6 bytes of the secret) is too common to search for."""


def _b64_cores(data: bytes) -> list[str]:
    """The base64 text of `data` wherever it starts in a longer encoded string: the whole encoding (the
    secret alone, `==` included) and, for each of the three byte alignments, the run of characters that
    encode only bytes of `data` (what a `Basic` header or an encoded JSON body that quotes it contains)."""
    import base64

    out = []
    for enc in (base64.b64encode, base64.urlsafe_b64encode):
        out.append(enc(data).decode("ascii"))
        for k in range(3):
            text = enc(b"\0" * k + data).decode("ascii")
            start, end = (4 if k else 0), (k + len(data)) // 3 * 4
            if end - start >= _MIN_CORE:
                out.append(text[start:end])
    return out


def secret_forms(secret: str) -> set[str]:
    """Every spelling of `secret` an echo could carry: raw, JSON-escaped, URL-encoded (both ways of
    writing a space), base64 (standard and URL-safe, any alignment) and hex (either case)."""
    if len(secret) < MIN_SECRET:
        return set()
    import json
    from urllib.parse import quote, quote_plus

    raw = secret.encode("utf-8")
    forms = {secret, json.dumps(secret)[1:-1], json.dumps(secret, ensure_ascii=False)[1:-1]}
    forms |= {quote(secret, safe=""), quote_plus(secret, safe=""), quote(secret)}
    forms |= set(_b64_cores(raw))
    forms |= {raw.hex(), raw.hex().upper()}
    return {f for f in forms if len(f) >= MIN_SECRET}


class Scrubber:
    """Replaces every spelling of a fixed set of secrets in text (`secret_forms`), longest first.

    Built once per target from the credentials the exporter sends it (`for_credentials`): whatever
    that target answers (label values, error details, its version) passes through it before it is
    kept, exported, shown or logged, so a target that echoes its `Authorization` header exports none
    of it. Calling it on text without any of the secrets costs one substring search per form."""

    __slots__ = ("forms", "mark")

    def __init__(self, secrets: Iterable[str] = (), mark: str = REDACTED) -> None:
        found: set[str] = set()
        for s in secrets:
            found |= secret_forms(s)
        self.forms = tuple(sorted(found, key=lambda f: (-len(f), f)))
        self.mark = mark

    def __bool__(self) -> bool:
        return bool(self.forms)

    def __call__(self, text: str) -> str:
        for f in self.forms:
            if f in text:
                text = text.replace(f, self.mark)
        return text

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Scrubber) and other.forms == self.forms and other.mark == self.mark

    def __hash__(self) -> int:
        return hash((self.forms, self.mark))

    @classmethod
    def for_credentials(cls, url: str, basic: Iterable[tuple[str, str]] = (), token: str | None = None) -> Scrubber:
        """The scrubber for one target: its bearer token, and for each basic-auth pair (given, or the
        URL's userinfo) the password and `user:password` (the `Basic` header is its base64)."""
        secrets: list[str] = []
        if token:
            secrets.append(token)
        pairs = list(basic)
        try:
            parts = urlsplit(url)
            if parts.username is not None and parts.password:
                pairs.append((unquote(parts.username), unquote(parts.password)))
        except ValueError:
            pass
        for user, password in pairs:
            if password:
                secrets += [password, f"{user}:{password}", f"{quote(user, safe='')}:{quote(password, safe='')}"]
        return cls(secrets)


NO_SCRUB = Scrubber()

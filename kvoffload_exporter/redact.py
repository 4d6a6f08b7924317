"""Redaction for anything that leaves the process as text (logs, pages, reports): pure, no I/O.

A target URL may carry `user:password@`; aiohttp uses it as basic auth, everything else must only
ever see the URL without it.
"""

from __future__ import annotations

import json
import re
import unicodedata
from collections.abc import Iterable
from urllib.parse import quote, quote_plus, unquote, urlsplit, urlunsplit

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


MIN_SECRET = 8
"""A credential shorter than this is refused where it is loaded (config.credentials, the canary's API key):
searching for it would rewrite ordinary data (a 5-character password inside every model name) and show
where it occurs. `Scrubber` itself ignores shorter strings."""
_MIN_CORE = 8
"""A base64 run shorter than this (6 bytes of the secret) is too common to search for."""
_BREAK = r"(?:\\r|\\n|\r|\n)*"
"""What MIME (76-character lines) or PEM wrapping puts between two base64 characters, raw or JSON-escaped."""


def too_short(secret: str) -> bool:
    """True for a credential too short to be scrubbed safely (MIN_SECRET): refuse it where it is loaded."""
    return len(unicodedata.normalize("NFKC", secret)) < MIN_SECRET


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


def _percent_forms(secret: str) -> set[str]:
    """URL-encoded as `quote` writes it (both ways of writing a space, `/` kept or not), every byte
    encoded, and each of those encoded once more (`%` as `%25`). Hex case is left to the matcher."""
    raw = secret.encode("utf-8")
    once = {quote(secret, safe=""), quote_plus(secret, safe=""), quote(secret), "".join(f"%{b:02X}" for b in raw)}
    return once | {quote(f, safe="") for f in once}


def _json_forms(secret: str) -> set[str]:
    """JSON string bodies: ASCII-escaped or not, `/` written as `\\/` or not, every character as `\\uXXXX`."""
    forms = {json.dumps(secret)[1:-1], json.dumps(secret, ensure_ascii=False)[1:-1]}
    forms |= {f.replace("/", "\\/") for f in forms}
    utf16 = secret.encode("utf-16-be", "surrogatepass")  # a character past U+FFFF as its surrogate pair
    forms.add("".join(f"\\u{int.from_bytes(utf16[i : i + 2]):04x}" for i in range(0, len(utf16), 2)))
    return forms


def secret_forms(secret: str) -> set[str]:
    """Every documented spelling of `secret` (docs/security.md): raw, JSON-escaped (`\\/` too),
    URL-encoded (either space, every byte, twice), base64 (standard and URL-safe, any alignment), hex, and
    byte escapes (`b'...'` as Python prints bytes, every byte as `\\xNN`).
    The matcher (`Scrubber`) ignores case (percent and hex digits, a target that upper-cases what it
    echoes), reads text NFKC-normalised too (fullwidth letters) and lets base64 run over line breaks."""
    out: set[str] = set()
    for s in {secret, unicodedata.normalize("NFKC", secret)}:
        if len(s) < MIN_SECRET:
            continue
        raw = s.encode("utf-8")
        out |= {s} | _json_forms(s) | _percent_forms(s) | set(_b64_cores(raw)) | {raw.hex()}
        out |= {repr(raw)[2:-1], "".join(f"\\x{b:02x}" for b in raw)}  # bytes as Python and aiohttp's errors show them
    return {f for f in out if len(f) >= MIN_SECRET}


_REGEX_FORMS = 512
_PREFIX = 4  # every form is at least MIN_SECRET (8) characters long


def _b64ish(form: str) -> bool:
    return len(form) >= _MIN_CORE and all(c.isalnum() or c in "+/=-_" for c in form)


class Scrubber:
    """Replaces every spelling of a fixed set of secrets in text (`secret_forms`), longest first, with
    `<redacted>`: case-insensitive, on the NFKC form of non-ASCII text, base64 across line breaks.

    Built per target from the credentials the exporter sends it plus every secret the process knows
    (`known()`: the canary's API key, the other targets' credentials): whatever a target answers (label
    values, error details, its version) passes through it before it is kept, exported, shown or logged,
    and the log formatters pass every line through `scrub`. Text without any of the secrets costs one
    lower-casing and one substring search per form."""

    __slots__ = ("_any", "_index", "_lows", "_rx", "forms", "mark")

    def __init__(self, secrets: Iterable[str] = (), mark: str = REDACTED) -> None:
        found: set[str] = set()
        for s in secrets:
            found |= secret_forms(s)
        self.forms = tuple(sorted(found, key=lambda f: (-len(f), f)))
        self._lows = tuple(dict.fromkeys(f.lower() for f in self.forms))
        # One search in C over the lower-cased text: most texts hold no secret (~0.7 µs for one target's 46
        # forms). The process's scrubber (`known`, every target's secrets: 21,000 forms at 1,000 targets)
        # would make that regex cost ~6 ms a log line; it looks forms up by their first characters instead.
        self._any = re.compile("|".join(map(re.escape, self._lows))) if 0 < len(self._lows) <= _REGEX_FORMS else None
        self._index: dict[str, list[str]] = {}
        if len(self._lows) > _REGEX_FORMS:
            for f in self._lows:
                self._index.setdefault(f[:_PREFIX], []).append(f)
        self._rx: dict[tuple[str, ...], re.Pattern[str]] = {}
        self.mark = mark

    def __bool__(self) -> bool:
        return bool(self.forms)

    def _sub(self, text: str) -> str:
        low = text.lower()
        broken = "\n" in text or "\r" in text or "\\n" in text or "\\r" in text
        if self._index:
            found = self._indexed(low)
            if broken:
                found += [f for f in self._indexed(re.sub(_BREAK, "", low)) if f not in found and _b64ish(f)]
        else:
            if not broken and (self._any is None or self._any.search(low) is None):
                return text
            found = [f for f in self._lows if f in low]
            if broken:
                flat = re.sub(_BREAK, "", low)
                found += [f for f in self._lows if f not in found and _b64ish(f) and f in flat]
        if not found:
            return text
        key = tuple(sorted(found, key=lambda f: (-len(f), f)))
        rx = self._rx.get(key)
        if rx is None:
            if len(self._rx) > 256:
                self._rx.clear()
            alts = (_BREAK.join(map(re.escape, f)) if _b64ish(f) else re.escape(f) for f in key)
            rx = self._rx[key] = re.compile("|".join(alts), re.IGNORECASE)
        return rx.sub(self.mark.replace("\\", "\\\\"), text)

    def _indexed(self, low: str) -> list[str]:
        """The forms found in `low`, looked up by the characters at each position (one dict lookup each)."""
        index, found = self._index, []
        for i in range(len(low) - _PREFIX + 1):
            for f in index.get(low[i : i + _PREFIX], ()):
                if low.startswith(f, i) and f not in found:
                    found.append(f)
        return found

    def __call__(self, text: str) -> str:
        if not self.forms or not text:
            return text
        out = self._sub(text)
        if not text.isascii():
            norm = unicodedata.normalize("NFKC", text)
            if norm != text:
                clean = self._sub(norm)
                if clean != norm:  # a secret spelled with fullwidth or compatibility characters
                    return self._sub(unicodedata.normalize("NFKC", out))
        return out

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Scrubber) and other.forms == self.forms and other.mark == self.mark

    def __hash__(self) -> int:
        return hash((self.forms, self.mark))

    @staticmethod
    def credentials(url: str, basic: Iterable[tuple[str, str]] = (), token: str | None = None) -> list[str]:
        """The secrets of one target: its bearer token, and for each basic-auth pair (given, or the URL's
        userinfo) the password and `user:password` (the `Basic` header is its base64)."""
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
        return secrets

    @classmethod
    def for_credentials(cls, url: str, basic: Iterable[tuple[str, str]] = (), token: str | None = None) -> Scrubber:
        """The scrubber for one target: its own credentials (`credentials`) and the secrets every target's
        text is searched for (`register(shared=True)`: the canary's API key, web-config passwords). Its own
        are registered too (not shared), so every other exit (`scrub`: logs, reports) removes them."""
        own = cls.credentials(url, basic, token)
        register(*own)
        return cls([*own, *(s for s, shared in _KNOWN.items() if shared)])


_KNOWN: dict[str, bool] = {}
"""Every secret this process loaded -> whether every target's text is searched for it (the canary's API
key, web-config passwords: a target may echo them) or only the logs and reports (one target's
credentials). Never forgotten on reload: a rotated password is still removed from older text."""
_MAX_KNOWN = 4096
_EVICTED = [0]  # secrets dropped at the cap (kvoffload_exporter_redaction_secrets_evicted_total)
_GENERATION = [0, 0]  # any secret, shared secrets
_ALL: list[Scrubber] = []


def register(*secrets: str, shared: bool = False) -> None:
    """Make `secrets` known to every exit (`scrub`); `shared`: to every target's scrubber built after this."""
    new = [s for s in secrets if s and len(s) >= MIN_SECRET and (s not in _KNOWN or (shared and not _KNOWN[s]))]
    if not new:
        return
    for s in new:
        if s not in _KNOWN and len(_KNOWN) >= _MAX_KNOWN:  # a bound on memory, 4096 credentials
            _KNOWN.pop(next(k for k, v in _KNOWN.items() if not v) if not all(_KNOWN.values()) else next(iter(_KNOWN)))
            _EVICTED[0] += 1
        _KNOWN[s] = shared or _KNOWN.get(s, False)
    _GENERATION[0] += 1
    if shared:
        _GENERATION[1] += 1
    _ALL.clear()


def evicted() -> int:
    """Secrets dropped from the process-wide list at its cap (the oldest target credential first): a dropped
    secret is no longer removed from text, so the cap is counted
    (kvoffload_exporter_redaction_secrets_evicted_total)."""
    return _EVICTED[0]


def generation(shared: bool = True) -> int:
    """Changes whenever a (shared) secret becomes known: a scrubber built before is out of date."""
    return _GENERATION[1 if shared else 0]


def known() -> Scrubber:
    """The scrubber of every secret the process knows."""
    if not _ALL:
        _ALL.append(Scrubber(_KNOWN))
    return _ALL[0]


_CREDENTIAL = re.compile(
    r"(?i:(authorization|x-api-key|api[_-]?key)(\\?[\"']?\s*[:=]\s*\\?[\"']?)(?:(bearer|basic|token)\s+)?)"
    r"[^\s\"'\\,;}&]+"
    r"|(?i:(bearer))\s+[A-Za-z0-9._~+/=-]+"
    r"|\b(Basic)\s+[A-Za-z0-9+/]{8,}={0,2}"
)


def _hide(m: re.Match[str]) -> str:
    name, sep, scheme, bearer, basic = m.groups()
    if name is not None:
        return f"{name}{sep}{scheme + ' ' if scheme else ''}{REDACTED}"
    return f"{bearer or basic} {REDACTED}"


def _maybe_credential(text: str) -> bool:
    low = text.lower()
    return any(w in low for w in ("authorization", "bearer", "basic", "api-key", "api_key", "apikey"))


def scrub(text: str) -> str:
    """`text` without any secret the process knows (`known`, every spelling) and without the value of any
    `Authorization`/`Bearer`/`Basic`/API-key credential it quotes, whatever that value: every exit that
    is not a label value (logs, reports, JSON, warnings built from HTTP errors and redirects)."""
    text = known()(text)
    return _CREDENTIAL.sub(_hide, text) if _maybe_credential(text) else text


NO_SCRUB = Scrubber()

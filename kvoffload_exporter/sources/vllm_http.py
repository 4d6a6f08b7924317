"""GET a vLLM server's `/metrics` and `/version` with timeouts, a body-size cap and closed error reasons.

Redirects are followed only within the target's origin (scheme, host, port): a compromised target
must not point the exporter at another host (blind SSRF) or have that host's data exported under its
own label. Credentials go only to the target, as basic auth or a bearer token.
"""

from __future__ import annotations

import base64
import logging
import os
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from urllib.parse import unquote, urljoin, urlsplit

import aiohttp

from kvoffload_exporter.redact import origin, redact_url, scrub

log = logging.getLogger("kvoffload.source")

Auth = tuple[str, str] | str | None
"""(user, password) for basic auth, a bearer token, or None (userinfo in the URL still applies)."""

MAX_REDIRECTS = 5

# octet-stream: static file servers holding captured dumps (Prometheus accepts those too).
_TEXT_TYPES = ("text/plain", "application/openmetrics-text", "application/octet-stream")


class ScrapeError(Exception):
    """A failed poll. `reason` is one of catalogue.SCRAPE_ERROR_REASONS; `detail` is for logs only."""

    def __init__(self, reason: str, detail: str):
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail


def client_timeout(total: float) -> aiohttp.ClientTimeout:
    return aiohttp.ClientTimeout(total=total, connect=min(total, 2.0))


def auth_headers(url: str, auth: Auth) -> dict[str, str]:
    """Authorization for `auth`, else for the URL's userinfo (never sent anywhere else)."""
    if isinstance(auth, str):
        return {"Authorization": f"Bearer {auth}"}
    if auth is None:
        parts = urlsplit(url)
        if parts.username is None:
            return {}
        auth = (parts.username, parts.password or "")
    return {"Authorization": basic_auth(unquote(auth[0]), unquote(auth[1]))}


def basic_auth(user: str, password: str) -> str:
    """RFC 7617 `Basic` credentials (aiohttp.BasicAuth is deprecated)."""
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode("ascii")


def strip_userinfo(url: str) -> str:
    """The URL without `user:pass@` (sent as a header instead, so aiohttp never sees it twice)."""
    parts = urlsplit(url)
    if "@" not in parts.netloc:
        return url
    return parts._replace(netloc=parts.netloc.rpartition("@")[2]).geturl()


def _same_origin(location: str, home: tuple[str, str, int | None]) -> bool:
    try:
        return urlsplit(location).scheme in ("http", "https") and origin(location) == home
    except ValueError:  # a port that is not a number
        return False


@asynccontextmanager
async def same_origin_get(
    session: aiohttp.ClientSession,
    url: str,
    auth: Auth,
    timeout: aiohttp.ClientTimeout,
    headers: Mapping[str, str] | None = None,
) -> AsyncIterator[aiohttp.ClientResponse]:
    """GET that follows at most MAX_REDIRECTS redirects, all within `url`'s origin; any other
    redirect raises ScrapeError("redirect") with the (redacted) location in the detail."""
    sent = {**(headers or {}), **auth_headers(url, auth)}
    home = origin(url)
    current = strip_userinfo(url)
    for _ in range(MAX_REDIRECTS + 1):
        async with session.get(current, headers=sent, allow_redirects=False, timeout=timeout) as resp:
            if resp.status not in (301, 302, 303, 307, 308):
                yield resp
                return
            location = urljoin(current, resp.headers.get("Location", ""))
        if not _same_origin(location, home):
            raise ScrapeError("redirect", f"HTTP {resp.status} to another origin: {redact_url(location)}")
        current = strip_userinfo(location)
    raise ScrapeError("redirect", f"more than {MAX_REDIRECTS} redirects")


class BodyBudget:
    """Bytes of bodies held at once over every target of the process, from the first byte read until
    the poll has parsed them (a body waiting for a parser thread is held too). Each target is capped
    by `max_body_bytes`; this caps their sum, so 64 polls in flight cannot hold 64 full bodies. A poll
    that would take the sum past `limit` fails `too_large` (counted like the per-target cap) unless it
    is the only one holding bytes: the largest allowed body can always be read alone."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.used = 0
        self.holders = 0  # reservations holding bytes now

    def reserve(self) -> Reservation:
        return Reservation(self)


class Reservation:
    """One poll's share of a BodyBudget; `release` (idempotent) gives it all back."""

    __slots__ = ("budget", "held")

    def __init__(self, budget: BodyBudget) -> None:
        self.budget = budget
        self.held = 0

    def take(self, n: int) -> None:
        b = self.budget
        alone = b.holders == (1 if self.held else 0)
        if b.used + n > b.limit and not alone:
            raise ScrapeError("too_large", f"bodies in flight would exceed the process budget of {b.limit} bytes")
        if not self.held:
            b.holders += 1
        self.held += n
        b.used += n

    def release(self) -> None:
        if self.held:
            self.budget.used -= self.held
            self.budget.holders -= 1
            self.held = 0


BODY_BUDGET = BodyBudget(32 << 20)
"""The process's budget: two bodies at the default 16 MiB cap (a real vLLM body is ~70 KB)."""


async def _read_capped(resp: aiohttp.ClientResponse, max_bytes: int, hold: Reservation | None = None) -> bytearray:
    """The body, refused as soon as it passes `max_bytes` (or `hold`'s budget): read into one growing
    buffer, never a list of chunks joined at the end (which would hold it twice)."""
    if resp.content_length is not None and resp.content_length > max_bytes:
        raise ScrapeError("too_large", f"Content-Length {resp.content_length} > {max_bytes}")
    body = bytearray()
    async for chunk in resp.content.iter_chunked(1 << 16):
        if len(body) + len(chunk) > max_bytes:
            raise ScrapeError("too_large", f"body exceeds {max_bytes} bytes")
        if hold is not None:
            hold.take(len(chunk))
        body += chunk
    return body


async def fetch_metrics(
    session: aiohttp.ClientSession,
    base_url: str,
    timeout: float,
    max_bytes: int,
    auth: Auth = None,
    hold: Reservation | None = None,
) -> str:
    """Body of exactly `/metrics` (never `/metrics/`, which negotiates OpenMetrics and renames `vllm:`)."""
    return await fetch_url(session, base_url + "/metrics", timeout, max_bytes, auth, hold)


def tls_text(e: aiohttp.ClientSSLError) -> str:
    """A failed TLS handshake in words (its errno would read "operation not permitted")."""
    where = f"{e.host}:{e.port}"
    if isinstance(e, aiohttp.ClientConnectorCertificateError):
        cert = e.certificate_error
        why = getattr(cert, "verify_message", None) or getattr(cert, "reason", None) or type(cert).__name__
        return f"TLS certificate of {where} not trusted: {why}"
    reason = getattr(e.os_error, "reason", None) or type(e.os_error).__name__
    return f"TLS handshake with {where} failed: {str(reason).lower().replace('_', ' ')}"


def transport_text(e: BaseException) -> str:
    """A connection failure in words, without the client library's internals (`ssl:default`, `[Errno 111]`,
    the exception's class): `cannot connect to 127.0.0.1:1: connection refused`."""
    if isinstance(e, aiohttp.ClientConnectorError):
        os_error = e.os_error
        why = os.strerror(os_error.errno) if os_error.errno and os_error.errno > 0 else os_error.strerror
        if isinstance(e, aiohttp.ClientConnectorDNSError):
            return f"cannot resolve {e.host}: {why}"
        return f"cannot connect to {e.host}:{e.port}: {(why or 'failed').lower()}"
    if isinstance(e, aiohttp.ServerDisconnectedError):
        return "the server closed the connection"
    if isinstance(e, ConnectionResetError):
        return "connection reset by the server"
    if isinstance(e, OSError) and e.strerror:
        return e.strerror
    text = str(e) or type(e).__name__
    return text.replace(" ssl:default", "").replace(" ssl:None", "")


async def fetch_url(
    session: aiohttp.ClientSession,
    url: str,
    timeout: float,
    max_bytes: int,
    auth: Auth = None,
    hold: Reservation | None = None,
) -> str:
    """Text exposition at exactly `url` (a target's `extra_metrics_urls` entry, or its `/metrics`), under
    the same timeout, size cap, same-origin redirect rule and closed error reasons as every poll; its
    bytes are charged to `hold` (the caller releases them once the body is parsed)."""
    try:
        async with same_origin_get(
            session,
            url,
            auth,
            client_timeout(timeout),
            {"Accept": "text/plain; version=0.0.4"},
        ) as resp:
            if resp.status != 200:
                raise ScrapeError("http_status", f"HTTP {resp.status}")
            ctype = resp.headers.get("Content-Type", "")
            if ctype and not ctype.startswith(_TEXT_TYPES):
                raise ScrapeError("content_type", f"unexpected Content-Type {ctype!r}")
            body = await _read_capped(resp, max_bytes, hold)
    except ScrapeError:
        raise
    except TimeoutError as e:  # aiohttp raises the builtin on total timeout
        raise ScrapeError("timeout", f"no complete answer within {timeout}s") from e
    except aiohttp.ClientPayloadError as e:
        raise ScrapeError("truncated", str(e)) from e
    except aiohttp.ClientSSLError as e:
        raise ScrapeError("tls", tls_text(e)) from e
    except (aiohttp.ClientError, ConnectionError) as e:
        raise ScrapeError("connect", transport_text(e)) from e
    if body and not body.endswith(b"\n"):
        raise ScrapeError("truncated", "body does not end with a newline")
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ScrapeError("parse", "body is not UTF-8 text") from e
    del body  # only the text is kept past this point
    if ctype.startswith("application/openmetrics-text"):
        _openmetrics_end(text)
    return text


def _openmetrics_end(text: str) -> None:
    """An OpenMetrics body ends with its one `# EOF` line: one missing means it was cut short, one
    earlier means what follows is not part of it (Prometheus refuses both)."""
    if not (text == "# EOF\n" or text.endswith("\n# EOF\n")):
        raise ScrapeError("parse", "OpenMetrics body without # EOF as its last line")
    head = text[:-6]
    if head.startswith("# EOF\n") or "\n# EOF\n" in head:
        raise ScrapeError("parse", "# EOF before the end of an OpenMetrics body")


async def fetch_version(
    session: aiohttp.ClientSession,
    base_url: str,
    timeout: float,
    auth: Auth = None,
    warn: Callable[[str, str], None] | None = None,
) -> str | None:
    """`GET /version` → "0.26.0"; None when the server does not say (best effort, never raises: a failure
    is counted in sources.version.VERSION_ERRORS and leaves the target up with version `unknown`).
    A redirect to another origin is worth a WARNING: `warn(reason, detail)` writes it (the poller's, within
    its log budget and through its scrubber); without one it is logged here. The detail has been through
    redact.scrub either way: a Location may quote the token it was sent."""
    from kvoffload_exporter.sources.version import MAX_VERSION_BODY, VersionError, count, parse_version

    try:
        async with same_origin_get(session, base_url + "/version", auth, client_timeout(timeout)) as resp:
            if resp.status != 200:
                raise VersionError("http_status", f"HTTP {resp.status}")
            body = await resp.content.read(MAX_VERSION_BODY + 1)
            while len(body) <= MAX_VERSION_BODY and (more := await resp.content.read(MAX_VERSION_BODY + 1 - len(body))):
                body += more
            return parse_version(body)
    except VersionError as e:
        reason, detail = e.reason, str(e)
    except ScrapeError as e:
        reason, detail = e.reason, e.detail
    except TimeoutError:
        reason, detail = "timeout", f"no answer within {timeout}s"
    except aiohttp.ClientError as e:
        reason, detail = "connect", type(e).__name__
    except Exception as e:  # never the target's failure
        reason, detail = "internal", type(e).__name__
    count(reason)
    detail = scrub(detail)
    log.debug("%s/version: %s", redact_url(base_url), detail)
    if reason == "redirect":
        if warn is not None:
            warn(reason, detail)
        else:
            log.warning("%s/version: %s", redact_url(base_url), detail)
    return None

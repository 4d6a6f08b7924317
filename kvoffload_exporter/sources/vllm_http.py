"""GET a vLLM server's `/metrics` and `/version` with timeouts, a body-size cap and closed error reasons.

The requests go through `sources.pollclient.PollClient` (keep-alive HTTP/1.1, one pool per origin).
Redirects are followed only within the target's origin (scheme, host, port): a compromised target
must not point the exporter at another host (blind SSRF) or have that host's data exported under its
own label. Credentials go only to the target, as basic auth or a bearer token.
"""

from __future__ import annotations

import base64
import logging
from asyncio import timeout as asyncio_timeout
from collections.abc import Callable, Mapping
from urllib.parse import unquote, urljoin, urlsplit

import aiohttp

from kvoffload_exporter.redact import origin, redact_url, scrub
from kvoffload_exporter.sources.budget import BODY_BUDGET, BodyBudget, Reservation, ScrapeError
from kvoffload_exporter.sources.http1 import transport_text
from kvoffload_exporter.sources.pollclient import PollClient, Response

__all__ = [
    "BODY_BUDGET",
    "MAX_REDIRECTS",
    "Auth",
    "BodyBudget",
    "Client",
    "PollClient",
    "Reservation",
    "ScrapeError",
    "auth_headers",
    "basic_auth",
    "fetch_metrics",
    "fetch_url",
    "fetch_version",
    "same_origin_get",
    "strip_userinfo",
]

log = logging.getLogger("kvoffload.source")

Auth = tuple[str, str] | str | None
"""(user, password) for basic auth, a bearer token, or None (userinfo in the URL still applies)."""

Client = PollClient | aiohttp.ClientSession
"""What a fetch is given: the exporter's PollClient (its connections kept alive between polls), or an
aiohttp session (the canary's, tests'): then one PollClient serves that fetch and is closed after it."""

MAX_REDIRECTS = 5

# octet-stream: static file servers holding captured dumps (Prometheus accepts those too).
_TEXT_TYPES = ("text/plain", "application/openmetrics-text", "application/octet-stream")
_METRICS_HEADERS = {"Accept": "text/plain; version=0.0.4"}
_VERSION_REASONS = ("timeout", "connect", "http_status", "too_large", "parse", "redirect", "internal")


def auth_headers(url: str, auth: Auth) -> dict[str, str]:
    """Authorization for `auth`, else for the URL's userinfo (never sent anywhere else)."""
    if isinstance(auth, str):
        return {"Authorization": f"Bearer {auth}"}
    if auth is None:
        if "@" not in url:
            return {}
        parts = urlsplit(url)
        if parts.username is None:
            return {}
        auth = (parts.username, parts.password or "")
    return {"Authorization": basic_auth(unquote(auth[0]), unquote(auth[1]))}


def basic_auth(user: str, password: str) -> str:
    """RFC 7617 `Basic` credentials."""
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode("ascii")


def strip_userinfo(url: str) -> str:
    """The URL without `user:pass@` (sent as a header instead, never in the request line)."""
    if "@" not in url:
        return url
    parts = urlsplit(url)
    if "@" not in parts.netloc:
        return url
    return parts._replace(netloc=parts.netloc.rpartition("@")[2]).geturl()


def _same_origin(location: str, home: tuple[str, str, int | None]) -> bool:
    try:
        return urlsplit(location).scheme in ("http", "https") and origin(location) == home
    except ValueError:  # a port that is not a number
        return False


async def same_origin_get(
    client: PollClient, url: str, auth: Auth, timeout: float, headers: Mapping[str, str] | None = None
) -> Response:
    """GET (its head read: the caller reads the body, then releases it) that follows at most
    MAX_REDIRECTS redirects, all within `url`'s origin; any other redirect raises ScrapeError("redirect")
    with the (redacted) location in the detail. Each connection attempt gets min(timeout, 2 s); the
    caller bounds the whole exchange, redirects included, by `timeout`."""
    sent = {**(headers or {}), **auth_headers(url, auth)}
    current = strip_userinfo(url)
    connect = min(timeout, 2.0)
    for _ in range(MAX_REDIRECTS + 1):
        resp = await client.open(current, sent, connect)
        if resp.status not in (301, 302, 303, 307, 308):
            return resp
        resp.release()  # its body is never read: the connection closes
        location = urljoin(current, resp.headers.get("location", ""))
        if not _same_origin(location, origin(url)):
            raise ScrapeError("redirect", f"HTTP {resp.status} to another origin: {redact_url(location)}")
        current = strip_userinfo(location)
    raise ScrapeError("redirect", f"more than {MAX_REDIRECTS} redirects")


async def fetch_metrics(
    session: Client,
    base_url: str,
    timeout: float,
    max_bytes: int,
    auth: Auth = None,
    hold: Reservation | None = None,
) -> str:
    """Body of exactly `/metrics` (never `/metrics/`, which negotiates OpenMetrics and renames `vllm:`)."""
    return await fetch_url(session, base_url + "/metrics", timeout, max_bytes, auth, hold)


async def fetch_url(
    session: Client,
    url: str,
    timeout: float,
    max_bytes: int,
    auth: Auth = None,
    hold: Reservation | None = None,
) -> str:
    """Text exposition at exactly `url` (a target's `extra_metrics_urls` entry, or its `/metrics`), under
    the same timeout, size cap, same-origin redirect rule and closed error reasons as every poll; its
    bytes are charged to `hold` (the caller releases them once the body is parsed)."""
    if not isinstance(session, PollClient):
        async with PollClient() as client:
            return await fetch_url(client, url, timeout, max_bytes, auth, hold)
    try:
        async with asyncio_timeout(timeout):
            resp = await same_origin_get(session, url, auth, timeout, _METRICS_HEADERS)
            try:
                if resp.status != 200:
                    raise ScrapeError("http_status", f"HTTP {resp.status}")
                ctype = resp.headers.get("content-type", "")
                if ctype and not ctype.startswith(_TEXT_TYPES):
                    raise ScrapeError("content_type", f"unexpected Content-Type {ctype!r}")
                body = await resp.read(max_bytes, hold)
            finally:
                resp.release()
    except ScrapeError:
        raise
    except TimeoutError as e:  # the whole GET, connect and redirects included
        raise ScrapeError("timeout", f"no complete answer within {timeout}s") from e
    except OSError as e:  # a write on a connection the peer reset
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


async def _version_body(client: PollClient, base_url: str, timeout: float, auth: Auth) -> bytes | bytearray:
    from kvoffload_exporter.sources.version import MAX_VERSION_BODY, VersionError

    async with asyncio_timeout(timeout):
        resp = await same_origin_get(client, base_url + "/version", auth, timeout)
        try:
            if resp.status != 200:
                raise VersionError("http_status", f"HTTP {resp.status}")
            return await resp.read(MAX_VERSION_BODY)
        finally:
            resp.release()


async def fetch_version(
    session: Client,
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
    from kvoffload_exporter.sources.version import VersionError, count, parse_version

    if not isinstance(session, PollClient):
        async with PollClient() as client:
            return await fetch_version(client, base_url, timeout, auth, warn)
    try:
        return parse_version(bytes(await _version_body(session, base_url, timeout, auth)))
    except VersionError as e:
        reason, detail = e.reason, str(e)
    except ScrapeError as e:  # tls, truncated, content_type: the connection's failure
        reason, detail = (e.reason if e.reason in _VERSION_REASONS else "connect"), e.detail
    except TimeoutError:
        reason, detail = "timeout", f"no answer within {timeout}s"
    except OSError as e:
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

"""The canary's only HTTP module: streamed `/v1/completions` with client TTFT, plus the GETs it needs.

TTFT is measured twice from just before the request is sent: to the first SSE `data:` event and to
the first event that carries a token (`text` or `token_ids`; text is empty with
`--skip-tokenizer-init`, hence `return_token_ids`). The stream is read with `iter_any()` and folded
by protocol.CompletionStream (linear, with a per-line and a per-response cap), so a long
`prompt_token_ids` echo never raises aiohttp's LineTooLong and a hostile one cannot stall the loop. One asyncio lock per
target keeps at most one canary request in flight there.

Every text that comes back from a target (error bodies, in-stream errors, kept per-request metrics, model
ids, `/version`, `/metrics`) passes through secrets.scrub here, before anything can store or print it:
a server that echoes the `Authorization` header leaks nothing further.
"""

from __future__ import annotations

import asyncio
import math
import os
import socket
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import aiohttp

from kvoffload_exporter.canary.wire import validate
from kvoffload_exporter.canary.wire.protocol import (
    MAX_LINE_BYTES,
    MAX_RESPONSE_BYTES,
    Completion,
    CompletionStream,
    MetricsError,
)
from kvoffload_exporter.canary.wire.secrets import ApiKey, scrub
from kvoffload_exporter.sources.pollclient import PollClient
from kvoffload_exporter.sources.vllm_http import ScrapeError, fetch_metrics, fetch_version


def _retry_after(resp: aiohttp.ClientResponse) -> float | None:
    raw = resp.headers.get("Retry-After")
    try:
        value = float(raw) if raw is not None else None
    except ValueError:
        return None  # HTTP-date form: the back-off decides
    return value if value is not None and math.isfinite(value) and value >= 0 else None


def _scrub_kept(value: object) -> object:
    """A kept (validate.bounded, so small) JSON value with every string scrubbed of secrets."""
    if isinstance(value, str):
        return scrub(value)
    if isinstance(value, list):
        return [_scrub_kept(v) for v in value]
    if isinstance(value, dict):
        return {scrub(str(k)): _scrub_kept(v) for k, v in value.items()}
    return value


def _why(e: aiohttp.ClientError) -> str:
    """A user's sentence for a failed connection: no exception class names, no URL (the caller names it)."""
    if isinstance(e, aiohttp.ClientConnectorError):
        err = e.os_error
        if isinstance(err, socket.gaierror):
            return "cannot connect (host name not resolved)"
        return f"cannot connect ({os.strerror(err.errno).lower()})" if err.errno else "cannot connect"
    if isinstance(e, aiohttp.InvalidURL):
        return "not a valid URL"
    if isinstance(e, aiohttp.ClientResponseError):
        return f"invalid HTTP response ({e.message})"
    return "connection failed"


MAX_VERSION = 128
"""Longest version string believed (vLLM's are like `0.11.1rc2.dev93+g1f0d1840c`)."""


class CanaryClient:
    def __init__(
        self,
        session: aiohttp.ClientSession,
        api_key: ApiKey | None = None,
        request_timeout: float = 120.0,
        scrape_timeout: float = 10.0,
        max_metrics_bytes: int = 16 * 1024 * 1024,
        max_line_bytes: int = MAX_LINE_BYTES,
        max_response_bytes: int = MAX_RESPONSE_BYTES,
    ):
        self.session = session
        # The `/metrics` and `/version` reads go through the polls' own client, kept for the client's life so
        # that each cycle's scrapes reuse a connection (a session-less fetch would open and close one each).
        self.polls = PollClient()
        self._key = api_key
        self.request_timeout = request_timeout
        self.scrape_timeout = scrape_timeout
        self.max_metrics_bytes = max_metrics_bytes
        self.max_line_bytes = max_line_bytes
        self.max_response_bytes = max_response_bytes
        self._locks: dict[str, asyncio.Lock] = {}

    @property
    def has_api_key(self) -> bool:
        """Whether requests carry a key: a 401 then means "wrong key", not "needs a key"."""
        return self._key is not None

    def _headers(self) -> dict[str, str]:
        h = {"Content-Type": "application/json", "Accept": "text/event-stream"}
        if self._key is not None:
            h.update(self._key.header())
        return h

    def lock(self, base_url: str) -> asyncio.Lock:
        return self._locks.setdefault(base_url, asyncio.Lock())

    async def complete(self, base_url: str, body: dict[str, object]) -> Completion:
        """One streamed completion, read to `[DONE]`; never raises for HTTP or network failures."""
        async with self.lock(base_url):
            return await self._complete(base_url, body)

    async def burst(self, base_url: str, bodies: list[dict[str, object]]) -> list[Completion]:
        """`check --concurrency`: these completions at once; the target's lock is held for the burst."""
        async with self.lock(base_url):
            return list(await asyncio.gather(*(self._complete(base_url, b) for b in bodies)))

    async def _complete(self, base_url: str, body: dict[str, object]) -> Completion:
        out = Completion()
        timeout = aiohttp.ClientTimeout(total=self.request_timeout, connect=5.0, sock_read=self.request_timeout)
        t0 = time.perf_counter()
        try:
            async with self.session.post(
                base_url + "/v1/completions",
                json=body,
                headers=self._headers(),
                timeout=timeout,
                allow_redirects=False,  # a redirect is an answer (http_4xx), never followed elsewhere
            ) as resp:
                out.status = resp.status
                if resp.status != 200:
                    out.error = "http_429" if resp.status == 429 else "http_5xx" if resp.status >= 500 else "http_4xx"
                    out.retry_after = _retry_after(resp)
                    # 4 KiB read, 512 characters kept: a key echoed across the cut is still whole when scrubbed
                    said = (await resp.content.read(4096)).decode("utf-8", "replace")
                    out.detail = scrub(said)[:512]
                    return out
                stream = CompletionStream(out, self.max_line_bytes, self.max_response_bytes)
                async for chunk in resp.content.iter_any():
                    if stream.feed(chunk, time.perf_counter() - t0):
                        break
                stream.finish(time.perf_counter() - t0)
        except TimeoutError:
            out.error, out.detail = "timeout", f"no complete answer within {self.request_timeout}s"
        except aiohttp.ClientPayloadError as e:
            out.error, out.detail = "stream_error", str(e)[:512]
        except aiohttp.ClientError as e:
            out.error, out.detail = "connect", _why(e)[:512]
        except (ValueError, UnicodeError) as e:  # anything else malformed in the HTTP framing
            out.error, out.detail = "protocol", f"malformed answer ({type(e).__name__})"
        out.detail = scrub(out.detail)
        out.server_metrics = _scrub_kept(out.server_metrics)  # type: ignore[assignment]
        out.kv_transfer_params = _scrub_kept(out.kv_transfer_params)
        return out

    async def get(self, base_url: str, path: str) -> tuple[int | None, object]:
        """GET a small JSON (or empty) endpoint: (status, parsed body or None); (None, reason) on failure."""
        headers = self._key.header() if self._key is not None and path.startswith("/v1") else {}
        try:
            async with self.session.get(
                base_url + path,
                headers=headers,
                timeout=aiohttp.ClientTimeout(total=self.scrape_timeout, connect=min(5.0, self.scrape_timeout)),
                allow_redirects=False,  # the API key must never follow a redirect elsewhere
            ) as resp:
                raw = (await resp.content.read(4 * 1024 * 1024)).decode("utf-8", "replace")
                try:  # too deep, non-finite or not JSON: no body (the caller names what is missing)
                    data: object = validate.load(scrub(raw)) if raw.strip() else None
                except validate.Invalid:
                    data = None
                return resp.status, data
        except TimeoutError:
            return None, f"no answer within {self.scrape_timeout:g}s"
        except aiohttp.ClientError as e:
            return None, scrub(_why(e))

    async def metrics(self, base_url: str) -> str:
        """`/metrics` text; raises protocol.MetricsError with the source's closed reason."""
        try:
            text = await fetch_metrics(self.polls, base_url, self.scrape_timeout, self.max_metrics_bytes)
        except ScrapeError as e:
            raise MetricsError(scrub(str(e))) from None
        return scrub(text)  # kept as evidence ({role}_metrics_before.prom)

    async def version(self, base_url: str) -> str | None:
        """vLLM's version, or None: `/version` is optional, and a broken or huge one is no version."""
        try:
            v = await fetch_version(self.polls, base_url, self.scrape_timeout)
        except Exception:  # whatever a hostile /version does, the target stays usable
            return None
        if v is None or len(v) > MAX_VERSION or not v.isprintable():
            return None
        return scrub(v)


@asynccontextmanager
async def open_client(api_key: ApiKey | None, request_timeout: float) -> AsyncIterator[CanaryClient]:
    """A client with its own session (`check`; `serve` shares the exporter's session instead)."""
    async with aiohttp.ClientSession(read_bufsize=1 << 20, cookie_jar=aiohttp.DummyCookieJar()) as session:
        client = CanaryClient(session, api_key, request_timeout=request_timeout)
        try:
            yield client
        finally:
            await client.polls.close()

"""GET a vLLM server's `/metrics` and `/version` with timeouts, a body-size cap and closed error reasons."""

from __future__ import annotations

import json

import aiohttp

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


async def _read_capped(resp: aiohttp.ClientResponse, max_bytes: int) -> bytes:
    if resp.content_length is not None and resp.content_length > max_bytes:
        raise ScrapeError("too_large", f"Content-Length {resp.content_length} > {max_bytes}")
    chunks: list[bytes] = []
    size = 0
    async for chunk in resp.content.iter_chunked(1 << 16):
        size += len(chunk)
        if size > max_bytes:
            raise ScrapeError("too_large", f"body exceeds {max_bytes} bytes")
        chunks.append(chunk)
    return b"".join(chunks)


async def fetch_metrics(session: aiohttp.ClientSession, base_url: str, timeout: float, max_bytes: int) -> str:
    """Body of exactly `/metrics` (never `/metrics/`, which negotiates OpenMetrics and renames `vllm:`)."""
    try:
        async with session.get(
            base_url + "/metrics", timeout=client_timeout(timeout), headers={"Accept": "text/plain; version=0.0.4"}
        ) as resp:
            if resp.status != 200:
                raise ScrapeError("http_status", f"HTTP {resp.status}")
            ctype = resp.headers.get("Content-Type", "")
            if ctype and not ctype.startswith(_TEXT_TYPES):
                raise ScrapeError("content_type", f"unexpected Content-Type {ctype!r}")
            body = await _read_capped(resp, max_bytes)
    except ScrapeError:
        raise
    except TimeoutError as e:  # aiohttp raises the builtin on total timeout
        raise ScrapeError("timeout", f"no complete answer within {timeout}s") from e
    except aiohttp.ClientPayloadError as e:
        raise ScrapeError("truncated", str(e)) from e
    except (aiohttp.ClientConnectorError, aiohttp.ServerDisconnectedError, ConnectionError) as e:
        raise ScrapeError("connect", str(e)) from e
    except aiohttp.ClientError as e:
        raise ScrapeError("connect", f"{type(e).__name__}: {e}") from e
    if body and not body.endswith(b"\n"):
        raise ScrapeError("truncated", "body does not end with a newline")
    try:
        return body.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ScrapeError("parse", "body is not UTF-8 text") from e


async def fetch_version(session: aiohttp.ClientSession, base_url: str, timeout: float) -> str | None:
    """`GET /version` → "0.26.0"; None when the server does not say (best effort, never raises)."""
    try:
        async with session.get(base_url + "/version", timeout=client_timeout(timeout)) as resp:
            if resp.status != 200:
                return None
            data = json.loads(await _read_capped(resp, 64 * 1024))
            v = data.get("version") if isinstance(data, dict) else None
            return str(v) if v else None
    except (aiohttp.ClientError, TimeoutError, ScrapeError, ValueError):
        return None

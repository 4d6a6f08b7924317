"""Puts `traffic` arrivals on the wire: streaming `/v1/completions` to a loopback server (aiohttp).

Loopback only: the sender refuses any other host, so a demo never load-tests a real deployment by
mistake. Concurrency is capped; requests that would exceed the cap are counted as dropped.
"""

from __future__ import annotations

import asyncio
import ipaddress
import time
from dataclasses import dataclass, field
from urllib.parse import urlsplit

import aiohttp

from kvoffload_exporter.canary.wire.protocol import SseReader
from kvoffload_exporter.sim.traffic import Arrival, TrafficSpec, arrivals


def check_loopback(url: str) -> None:
    host = urlsplit(url).hostname or ""
    if host == "localhost":
        return
    try:
        if ipaddress.ip_address(host).is_loopback:
            return
    except ValueError:
        pass
    raise ValueError(f"traffic goes to loopback addresses only, not {host!r}")


@dataclass
class TrafficReport:
    sent: int = 0
    ok: int = 0
    errors: int = 0
    dropped: int = 0  # not sent: too many requests in flight
    cached_tokens: int = 0
    prompt_tokens: int = 0
    ttft_ms: list[float] = field(default_factory=list)

    def summary(self) -> str:
        ttft = sorted(self.ttft_ms)
        p50 = f"{ttft[len(ttft) // 2]:.1f} ms" if ttft else "n/a"
        share = self.cached_tokens / self.prompt_tokens if self.prompt_tokens else 0.0
        in_flight = self.sent - self.ok - self.errors  # cut off at stop, or still running
        return (
            f"{self.sent} sent = {self.ok} ok + {self.errors} failed + {in_flight} in flight when stopped; "
            f"{self.dropped} not sent (too many in flight); "
            f"cached prompt tokens {share:.0%}; client TTFT p50 {p50}"
        )


def _count_usage(report: TrafficReport, usage: object) -> None:
    if isinstance(usage, dict) and usage:
        report.prompt_tokens += usage.get("prompt_tokens", 0)
        report.cached_tokens += (usage.get("prompt_tokens_details") or {}).get("cached_tokens", 0)


async def _one(
    session: aiohttp.ClientSession, url: str, a: Arrival, headers: dict[str, str], report: TrafficReport
) -> None:
    body: dict[str, object] = {
        "prompt": list(a.prompt),
        "max_tokens": a.max_tokens,
        "stream": True,
        "stream_options": {"include_usage": True},
        "temperature": 0,
        "ignore_eos": True,
        "return_token_ids": True,
    }
    if a.salt:
        body["cache_salt"] = a.salt
    started = time.monotonic()
    try:
        async with session.post(url + "/v1/completions", json=body, headers=headers) as resp:
            if resp.status != 200:
                report.errors += 1
                return
            first = None
            reader = SseReader()
            async for chunk in resp.content.iter_any():
                for event in reader.feed(chunk):
                    if not isinstance(event, dict):
                        continue
                    if first is None and event.get("choices"):
                        first = time.monotonic() - started
                    _count_usage(report, event.get("usage"))
            report.ok += 1
            if first is not None:
                report.ttft_ms.append(first * 1e3)
    except (TimeoutError, aiohttp.ClientError, ValueError):  # ValueError: bad JSON or over an SSE cap
        report.errors += 1


async def send(
    url: str,
    spec: TrafficSpec,
    *,
    api_key: str | None = None,
    max_in_flight: int = 32,
    session: aiohttp.ClientSession | None = None,
    report: TrafficReport | None = None,
) -> TrafficReport:
    """Send every arrival of `spec` to `url` at its time; returns when all have finished."""
    check_loopback(url)
    url = url.rstrip("/")
    report = report if report is not None else TrafficReport()
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    own = session is None
    session = session or aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=None, sock_read=60))
    tasks: set[asyncio.Task[None]] = set()
    start = time.monotonic()
    try:
        for a in arrivals(spec):
            delay = start + a.at - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            if len(tasks) >= max_in_flight:
                report.dropped += 1
                continue
            report.sent += 1
            task = asyncio.create_task(_one(session, url, a, headers, report))
            tasks.add(task)
            task.add_done_callback(tasks.discard)
        if tasks:
            await asyncio.gather(*tasks)
    finally:
        for t in tasks:
            t.cancel()
        if own:
            await session.close()
    return report

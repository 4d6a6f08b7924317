"""The polls' HTTP client against real local servers that send hostile bytes: connections are kept alive
and reused, a stale one is retried once on a fresh connection, every framing (Content-Length, chunked,
to the end) is capped and a broken one is a closed error, never a traceback."""

from __future__ import annotations

import asyncio
import gzip
import socket
import zlib
from collections.abc import Callable

import pytest

from kvoffload_exporter.sources.budget import BodyBudget
from kvoffload_exporter.sources.http1 import MAX_HEAD_BYTES
from kvoffload_exporter.sources.vllm_http import PollClient, ScrapeError, fetch_metrics, fetch_version

pytestmark = pytest.mark.filterwarnings('ignore:Overriding the "event_loop_policy" fixture')


@pytest.fixture(params=["asyncio", "uvloop"])
def event_loop_policy(request: pytest.FixtureRequest) -> asyncio.AbstractEventLoopPolicy:
    """Every test on both loops `serve` may run on (kvoffload_exporter.server.eventloop)."""
    if request.param == "asyncio":
        return asyncio.DefaultEventLoopPolicy()
    uvloop = pytest.importorskip("uvloop")
    policy: asyncio.AbstractEventLoopPolicy = uvloop.EventLoopPolicy()
    return policy


BODY = b'vllm:prefix_cache_hits_total{engine="0",model_name="m"} 1\n' * 200

Reply = Callable[[int, bytes], bytes | None]
"""(request number on the server, request head) -> bytes to send, or None to close without answering."""


def ok(body: bytes = BODY, extra: bytes = b"") -> bytes:
    return b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: %d\r\n%s\r\n" % (len(body), extra) + body


class Raw:
    """A raw TCP server: reads request heads, answers with `reply`'s bytes (closing after `close_after`)."""

    def __init__(self, reply: Reply, close_after: Callable[[int], bool] = lambda n: False) -> None:
        self.reply = reply
        self.close_after = close_after
        self.connections = 0
        self.requests: list[bytes] = []
        self.closed_by_client = 0
        self.server: asyncio.Server | None = None

    async def start(self, host: str = "127.0.0.1") -> str:
        self.server = await asyncio.start_server(self._serve, host, 0)
        port = self.server.sockets[0].getsockname()[1]
        return f"http://{'[' + host + ']' if ':' in host else host}:{port}"

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            while True:
                try:
                    head = await reader.readuntil(b"\r\n\r\n")
                except (asyncio.IncompleteReadError, ConnectionError):
                    self.closed_by_client += 1
                    return
                self.requests.append(head)
                n = len(self.requests)
                out = self.reply(n, head)
                if out is None:
                    return
                writer.write(out)
                await writer.drain()
                if self.close_after(n):
                    return
        finally:
            writer.close()

    async def close(self) -> None:
        assert self.server is not None
        self.server.close()
        await self.server.wait_closed()


async def _fetch_all(url: str, times: int, client: PollClient | None = None) -> list[str]:
    async with PollClient() as own:
        c = client or own
        return [await fetch_metrics(c, url, 2.0, 1 << 20) for _ in range(times)]


async def _error(reply: Reply, max_bytes: int = 1 << 20, **kw: Callable[[int], bool]) -> ScrapeError:
    server = Raw(reply, **kw)
    url = await server.start()
    try:
        async with PollClient() as client:
            with pytest.raises(ScrapeError) as e:
                await fetch_metrics(client, url, 2.0, max_bytes)
    finally:
        await server.close()
    return e.value


async def test_keep_alive_one_connection_serves_every_poll() -> None:
    server = Raw(lambda n, head: ok())
    url = await server.start()
    try:
        async with PollClient() as client:
            texts = [await fetch_metrics(client, url, 2.0, 1 << 20) for _ in range(5)]
            assert client.connects == 1
    finally:
        await server.close()
    assert texts == [BODY.decode()] * 5
    assert server.connections == 1 and len(server.requests) == 5


async def test_a_stale_connection_is_retried_once_on_a_fresh_one() -> None:
    # The second request reaches a connection the server drops without answering (its keep-alive ran out
    # just then): the poll succeeds on a new connection instead of failing `connect`.
    server = Raw(lambda n, head: None if n == 2 else ok())
    url = await server.start()
    try:
        async with PollClient() as client:
            assert await fetch_metrics(client, url, 2.0, 1 << 20) == BODY.decode()
            assert await fetch_metrics(client, url, 2.0, 1 << 20) == BODY.decode()
            assert client.connects == 2
    finally:
        await server.close()
    assert server.connections == 2 and len(server.requests) == 3


async def test_a_fresh_connection_closed_before_answering_is_connect_not_retried() -> None:
    e = await _error(lambda n, head: None)
    assert e.reason == "connect" and e.detail == "the server closed the connection"


async def test_an_idle_connection_the_server_closed_is_not_reused() -> None:
    server = Raw(lambda n, head: ok(), close_after=lambda n: True)  # answers, then closes (no Connection: close)
    url = await server.start()
    try:
        async with PollClient() as client:
            for _ in range(3):
                assert await fetch_metrics(client, url, 2.0, 1 << 20) == BODY.decode()
                await asyncio.sleep(0.05)  # the EOF arrives while the connection is idle
    finally:
        await server.close()
    assert server.connections == 3 and len(server.requests) == 3


async def test_connection_close_is_never_reused() -> None:
    server = Raw(lambda n, head: ok(extra=b"Connection: close\r\n"))
    url = await server.start()
    try:
        async with PollClient() as client:
            await fetch_metrics(client, url, 2.0, 1 << 20)
            await fetch_metrics(client, url, 2.0, 1 << 20)
            assert client.connects == 2
    finally:
        await server.close()


async def test_the_request_sends_host_agent_identity_and_no_cookie() -> None:
    server = Raw(lambda n, head: ok(extra=b"Set-Cookie: session=abc\r\n"))
    url = await server.start()
    try:
        await _fetch_all(url, 2)
    finally:
        await server.close()
    port = url.rsplit(":", 1)[1]
    first, second = (h.decode().lower() for h in server.requests)
    assert first.startswith("get /metrics http/1.1\r\n")
    assert f"host: 127.0.0.1:{port}\r\n" in first and "user-agent: kvoffload-exporter/" in first
    assert "accept-encoding: identity\r\n" in first and "accept: text/plain; version=0.0.4\r\n" in first
    assert "cookie" not in second


async def test_chunked_bodies_are_joined_and_bad_chunks_are_errors() -> None:
    def chunked(*parts: bytes) -> bytes:
        return b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" + b"".join(parts)

    half = len(BODY) // 2
    good = chunked(
        b"%x;ext=1\r\n" % half, BODY[:half], b"\r\n", b"%X\r\n" % (len(BODY) - half), BODY[half:], b"\r\n0\r\n\r\n"
    )
    server = Raw(lambda n, head: good)
    url = await server.start()
    try:
        async with PollClient() as client:
            assert [await fetch_metrics(client, url, 2.0, 1 << 20) for _ in range(2)] == [BODY.decode()] * 2
            assert client.connects == 1  # read to its exact end: reused
    finally:
        await server.close()
    assert (await _error(lambda n, head: chunked(b"zz\r\nab\r\n0\r\n\r\n"))).reason == "truncated"
    long_line = chunked(b"1;" + b"x" * 5000 + b"\r\n")
    assert (await _error(lambda n, head: long_line, close_after=lambda n: True)).reason == "truncated"
    cut = chunked(b"100\r\n", BODY[:10])
    assert (await _error(lambda n, head: cut, close_after=lambda n: True)).reason == "truncated"
    big = chunked(b"%x\r\n" % (2 << 20), BODY)
    assert (await _error(lambda n, head: big)).reason == "too_large"


async def test_a_body_cut_mid_way_is_truncated_and_an_overlong_one_is_cut_to_its_length() -> None:
    cut = b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(BODY) + BODY[:100]
    e = await _error(lambda n, head: cut, close_after=lambda n: True)
    assert e.reason == "truncated"
    extra = ok() + b"garbage after the body\n"
    server = Raw(lambda n, head: extra)
    url = await server.start()
    try:
        async with PollClient() as client:
            assert await fetch_metrics(client, url, 2.0, 1 << 20) == BODY.decode()
            await fetch_metrics(client, url, 2.0, 1 << 20)
            assert client.connects == 2  # a connection out of step is never reused
    finally:
        await server.close()


async def test_content_length_past_the_cap_or_unreadable_is_refused() -> None:
    assert (await _error(lambda n, head: ok(), max_bytes=100)).detail == f"Content-Length {len(BODY)} > 100"
    two = b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\nhello\n"
    assert (await _error(lambda n, head: two)).reason == "connect"
    eof = b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n\r\n" + BODY * 20  # to the end of the connection
    e = await _error(lambda n, head: eof, max_bytes=len(BODY) * 2, close_after=lambda n: True)
    assert e.reason == "too_large"


@pytest.mark.parametrize("coding", ["gzip", "deflate", "raw-deflate"])
async def test_compressed_bodies_are_read_and_capped_after_decompression(coding: str) -> None:
    def packed(data: bytes) -> bytes:
        if coding == "gzip":
            return gzip.compress(data)
        if coding == "deflate":
            return zlib.compress(data)
        c = zlib.compressobj(wbits=-15)
        return c.compress(data) + c.flush()

    name = coding.removeprefix("raw-").encode()

    def reply(body: bytes) -> Reply:
        return lambda n, head: ok(body, b"Content-Encoding: " + name + b"\r\n")

    server = Raw(reply(packed(BODY)))
    url = await server.start()
    try:
        assert await _fetch_all(url, 1) == [BODY.decode()]
    finally:
        await server.close()
    bomb = packed(b"\n" * (50 << 20))  # 50 MiB of newlines in ~50 KB
    assert len(bomb) < 1 << 20
    e = await _error(reply(bomb), max_bytes=1 << 20)
    assert e.reason == "too_large" and "decompressed" in e.detail
    assert (await _error(reply(packed(BODY)[:-8]))).reason == "truncated"


@pytest.mark.parametrize(
    "head",
    [
        b"HTTP/1.1 200 OK\r\nX-Long: " + b"a" * 9000 + b"\r\nContent-Length: 0\r\n\r\n",
        b"HTTP/1.1 200 OK\r\n" + b"X-Many: 1\r\n" * 200 + b"Content-Length: 0\r\n\r\n",
        b"HTTP/1.1 200 OK\r\n" + b"X: " + b"b" * (MAX_HEAD_BYTES + 10),  # a head that never ends
        b"SSH-2.0-OpenSSH_9.6\r\n\r\n",
        b"HTTP/1.1 2000 OK\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nno colon here\r\n\r\n",
        b"HTTP/1.1 200 OK\r\n folded: x\r\n\r\n",
    ],
    ids=["long-line", "many-headers", "endless-head", "not-http", "bad-status", "no-colon", "folded"],
)
async def test_a_hostile_head_is_a_connect_error_in_words(head: bytes) -> None:
    e = await _error(lambda n, h: head)
    assert e.reason == "connect" and e.detail.startswith("malformed response")


async def test_an_informational_status_is_http_status() -> None:
    e = await _error(lambda n, head: b"HTTP/1.1 102 Processing\r\n\r\n")
    assert e.reason == "http_status" and e.detail == "HTTP 102"


async def test_redirects_stay_in_the_origin_and_are_bounded() -> None:
    def reply(n: int, head: bytes) -> bytes:
        if head.startswith(b"GET /metrics "):
            return b"HTTP/1.1 302 Found\r\nLocation: /moved/metrics\r\nContent-Length: 0\r\n\r\n"
        if head.startswith(b"GET /moved/metrics "):
            return ok()
        return b"HTTP/1.1 307 Again\r\nLocation: /loop\r\nContent-Length: 0\r\n\r\n"

    server = Raw(reply)
    url = await server.start()
    try:
        assert await _fetch_all(url, 1) == [BODY.decode()]
        async with PollClient() as client:
            with pytest.raises(ScrapeError) as e:
                await fetch_metrics(client, url + "/loop", 2.0, 1 << 20)  # /loop/metrics → /loop → /loop ...
    finally:
        await server.close()
    assert e.value.reason == "redirect" and "more than 5 redirects" in e.value.detail
    away = b"HTTP/1.1 301 Moved\r\nLocation: http://u:secret@10.9.9.9:1/x?token=t\r\nContent-Length: 0\r\n\r\n"
    e2 = await _error(lambda n, head: away)
    assert e2.reason == "redirect" and "secret" not in e2.detail and "10.9.9.9" in e2.detail


async def test_an_unanswered_request_times_out() -> None:
    release = asyncio.Event()

    async def never(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await release.wait()
        writer.close()

    server = await asyncio.start_server(never, "127.0.0.1", 0)
    url = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
    try:
        async with PollClient() as client:
            with pytest.raises(ScrapeError) as e:
                await fetch_metrics(client, url, 0.2, 1 << 20)
    finally:
        release.set()
        server.close()
        await server.wait_closed()
    assert e.value.reason == "timeout" and e.value.detail == "no complete answer within 0.2s"


async def test_refused_and_unresolvable_targets_are_connect_errors_in_words() -> None:
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    async with PollClient() as client:
        with pytest.raises(ScrapeError) as e:
            await fetch_metrics(client, f"http://127.0.0.1:{port}", 2.0, 1 << 20)
        assert e.value.reason == "connect"
        assert e.value.detail == f"cannot connect to 127.0.0.1:{port}: connection refused"
        with pytest.raises(ScrapeError) as e:
            await fetch_metrics(client, "http://name.invalid:80", 2.0, 1 << 20)
        assert e.value.reason == "connect" and e.value.detail.startswith("cannot resolve name.invalid: ")


async def test_closing_the_client_closes_its_kept_connections() -> None:
    server = Raw(lambda n, head: ok())
    url = await server.start()
    try:
        client = PollClient()
        await fetch_metrics(client, url, 2.0, 1 << 20)
        await client.close()
        for _ in range(100):  # the server's read ends once the client's close reaches it
            if server.closed_by_client:
                break
            await asyncio.sleep(0.01)
        with pytest.raises(ScrapeError):
            await fetch_metrics(client, url, 2.0, 1 << 20)
    finally:
        await server.close()
    assert server.closed_by_client == 1 and len(server.requests) == 1


async def test_bytes_are_charged_to_the_budget_and_a_failed_read_is_not_reused() -> None:
    budget = BodyBudget(10)
    other, hold = budget.reserve(), budget.reserve()
    other.take(5)  # someone else holds bytes: this poll may not pass the budget
    server = Raw(lambda n, head: ok())
    url = await server.start()
    try:
        async with PollClient() as client:
            with pytest.raises(ScrapeError) as e:
                await fetch_metrics(client, url, 2.0, 1 << 20, None, hold)
            assert e.value.reason == "too_large"
            hold.release()
            await fetch_metrics(client, url, 2.0, 1 << 20)
            assert client.connects == 2
    finally:
        await server.close()


def _has_ipv6_loopback() -> bool:
    try:
        with socket.socket(socket.AF_INET6) as s:
            s.bind(("::1", 0))
        return True
    except OSError:
        return False


@pytest.mark.skipif(not _has_ipv6_loopback(), reason="no IPv6 loopback here")
async def test_an_ipv6_literal_target_is_polled_with_a_bracketed_host() -> None:
    server = Raw(
        lambda n, head: ok() if head.startswith(b"GET /metrics") else b"HTTP/1.1 404 No\r\nContent-Length: 0\r\n\r\n"
    )
    url = await server.start("::1")
    try:
        assert await _fetch_all(url, 2) == [BODY.decode()] * 2
        async with PollClient() as client:
            assert await fetch_version(client, url, 2.0) is None  # a 404: no version, never raises
    finally:
        await server.close()
    assert f"host: [::1]:{url.rsplit(':', 1)[1]}\r\n".encode() in server.requests[0].lower()

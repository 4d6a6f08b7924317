"""The canary HTTP client against a tiny fake server: SSE framing, both TTFTs, errors, auth."""

from __future__ import annotations

import asyncio
import json

import aiohttp
import pytest
from aiohttp import web

from kvoffload_exporter.canary.wire.client import CanaryClient
from kvoffload_exporter.canary.wire.protocol import SseReader, has_token, parse_models
from kvoffload_exporter.canary.wire.secrets import ApiKey


def test_sse_reader_splits_across_chunks_and_skips_comments() -> None:
    r = SseReader()
    assert r.feed(b": keep-alive\n\nda") == []
    assert r.feed(b'ta: {"a": 1}\r\n\ndata: {"b"') == [{"a": 1}]
    assert r.feed(b": 2}\n\ndata: [DONE]\n\n") == [{"b": 2}]
    assert r.done


def test_token_bearing_events() -> None:
    assert not has_token({"choices": [{"text": "", "index": 0}]})
    assert has_token({"choices": [{"text": "", "token_ids": [5]}]})  # --skip-tokenizer-init
    assert has_token({"choices": [{"text": " the"}]})
    assert not has_token({"choices": [], "usage": {}})


def test_parse_models() -> None:
    m = parse_models({"data": [{"id": "m", "max_model_len": 8192}, {"id": "n"}, "junk"]})
    assert m.ids == ["m", "n"] and m.max_model_len == {"m": 8192}
    assert parse_models(None).ids == []


SEEN = web.AppKey("seen", list)
SENT = web.AppKey("sent", list)


async def _huge_line(resp: web.StreamResponse, sent: list[int]) -> web.StreamResponse:
    chunk = b"x" * 2**20
    try:
        await resp.write(b"data: ")
        for _ in range(64):
            await resp.write(chunk)
            sent.append(len(chunk))
        await resp.write(b"\n\ndata: [DONE]\n\n")
    except (ConnectionResetError, RuntimeError):  # the client hung up at its cap
        pass
    return resp


async def _models(request: web.Request) -> web.Response:
    return web.json_response({"data": [{"id": "m"}]})


def _event(obj: object) -> bytes:
    return b"data: " + json.dumps(obj).encode() + b"\n\n"


async def _completions(request: web.Request) -> web.StreamResponse:
    body = await request.json()
    mode = body["prompt"][0]
    request.app[SEEN].append((dict(request.headers), body))
    if mode == 429:
        return web.json_response({"error": "busy"}, status=429, headers={"Retry-After": "7"})
    if mode == 500:
        return web.json_response({"error": "boom"}, status=500)
    resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await resp.prepare(request)
    if mode == 64:  # a hostile server: one 64 MiB line, 1 MiB at a time
        return await _huge_line(resp, request.app[SENT])
    await resp.write(b": keep-alive\n\n")
    # A first event without a token (role-like chunk), then the token-bearing one.
    await resp.write(_event({"choices": [{"index": 0, "text": ""}]}))
    await asyncio.sleep(0.02)
    if mode == 9:  # no return_token_ids support and an empty text (--skip-tokenizer-init)
        await resp.write(_event({"choices": [{"index": 0, "text": "", "finish_reason": "length"}]}))
    elif mode == 7:  # mid-stream error
        await resp.write(_event({"error": {"message": "engine died"}}))
    else:
        first = {
            "choices": [{"index": 0, "text": "", "token_ids": [42], "prompt_token_ids": list(range(400_000))}]
        }  # a ~3 MB line
        await resp.write(_event(first))
        await resp.write(
            _event(
                {
                    "choices": [],
                    "usage": {
                        "prompt_tokens": 3,
                        "completion_tokens": 1,
                        "prompt_tokens_details": {"cached_tokens": 2},
                    },
                    "metrics": {"queue_time_ms": 1.5},
                }
            )
        )
    if mode != 8:  # 8: the stream ends without [DONE]
        await resp.write(b"data: [DONE]\n\n")
    await resp.write_eof()
    return resp


@pytest.fixture
async def fake(aiohttp_server):  # type: ignore[no-untyped-def]
    app = web.Application()
    app[SEEN] = []
    app[SENT] = []
    app.router.add_post("/v1/completions", _completions)
    app.router.add_get("/v1/models", _models)
    server = await aiohttp_server(app)
    return server, app


async def test_streamed_completion(fake) -> None:  # type: ignore[no-untyped-def]
    server, app = fake
    async with aiohttp.ClientSession() as session:  # default read_bufsize: a 3 MB line must still work
        c = await CanaryClient(session, ApiKey("sk-x")).complete(
            str(server.make_url("")).rstrip("/"), {"prompt": [1, 2, 3]}
        )
    assert c.ok, c.detail
    assert c.events == 3
    assert c.ttft_event is not None and c.ttft_token is not None and c.ttft_event < c.ttft_token
    assert c.cached_tokens == 2 and c.tokens_spent == 4
    assert c.server_metrics == {"queue_time_ms": 1.5}
    headers, _ = app[SEEN][0]
    assert headers["Authorization"] == "Bearer sk-x"


async def test_token_event_inferred_without_token_ids(fake) -> None:  # type: ignore[no-untyped-def]
    server, _ = fake
    async with aiohttp.ClientSession() as session:
        c = await CanaryClient(session).complete(str(server.make_url("")).rstrip("/"), {"prompt": [9]})
    assert c.ok and c.ttft_token is not None and "inferred" in c.detail
    assert c.ttft_token == c.ttft_event  # the first event that has choices


@pytest.mark.parametrize("mode,error", [(429, "http_429"), (500, "http_5xx"), (7, "stream_error"), (8, "stream_error")])
async def test_failures_are_closed_reasons(fake, mode: int, error: str) -> None:  # type: ignore[no-untyped-def]
    server, _ = fake
    async with aiohttp.ClientSession() as session:
        c = await CanaryClient(session).complete(str(server.make_url("")).rstrip("/"), {"prompt": [mode]})
    assert c.error == error
    if mode == 429:
        assert c.retry_after == 7.0


async def test_connection_refused_and_one_request_in_flight(unused_tcp_port_factory) -> None:  # type: ignore[no-untyped-def]
    async with aiohttp.ClientSession() as session:
        client = CanaryClient(session, request_timeout=2.0)
        c = await client.complete(f"http://127.0.0.1:{unused_tcp_port_factory()}", {"prompt": [1]})
        assert c.error == "connect"
        status, _ = await client.get(f"http://127.0.0.1:{unused_tcp_port_factory()}", "/health")
        assert status is None


async def test_requests_to_one_target_are_serialised(fake) -> None:  # type: ignore[no-untyped-def]
    server, _ = fake
    url = str(server.make_url("")).rstrip("/")
    active = peak = 0
    async with aiohttp.ClientSession() as session:
        client = CanaryClient(session)
        orig = client._complete

        async def counting(u: str, body: dict) -> object:
            nonlocal active, peak
            active += 1
            peak = max(peak, active)
            try:
                return await orig(u, body)
            finally:
                active -= 1

        client._complete = counting  # type: ignore[method-assign]
        results = await asyncio.gather(*(client.complete(url, {"prompt": [1]}) for _ in range(4)))
    assert all(r.ok for r in results) and peak == 1


async def test_a_64_mib_line_fails_fast_with_the_cap_error(fake) -> None:  # type: ignore[no-untyped-def]
    server, _app = fake
    async with aiohttp.ClientSession() as session:
        c = await CanaryClient(session).complete(str(server.make_url("")).rstrip("/"), {"prompt": [64]})
    assert c.error == "too_large" and "line over the 8388608-byte cap" in c.detail
    assert c.total is None  # stopped reading: no completed response

"""A hostile vLLM for the canary: a real loopback server in front of the simulator.

GETs (/health, /version, /v1/models, /metrics) and well-behaved completions are forwarded to a real
simulator, so preflight and the counters are genuine; while `modes` names a hostile answer for a
path, that path answers it instead. Clearing `modes` is "the server was fixed".
"""

from __future__ import annotations

import base64
import json
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from urllib.parse import quote

import aiohttp
from aiohttp import web

from kvoffload_exporter.sim.server import start
from kvoffload_exporter.sim.simulator import SimOptions, Simulator

DEEP = 100_000


def _sse(*events: str) -> bytes:
    return b"".join(b"data: " + e.encode() + b"\n\n" for e in (*events, "[DONE]"))


def _token() -> str:
    return json.dumps({"choices": [{"index": 0, "text": "x", "token_ids": [5]}]})


def _usage(usage: str) -> bytes:
    """A good token event, then a usage event whose `usage` is the given raw JSON text."""
    return _sse(_token(), '{"choices": [], "usage": ' + usage + "}")


STREAMS: dict[str, Callable[[], bytes]] = {
    "choices_object": lambda: _sse('{"choices": {"0": {"text": "x", "token_ids": [5]}}}'),
    "deep": lambda: _sse("[" * DEEP + "]" * DEEP),
    "deep_object": lambda: _sse('{"choices": ' + '{"a": ' * DEEP + "1" + "}" * DEEP + "}"),
    "usage_string": lambda: _usage('"lots of tokens"'),
    "nan": lambda: _usage('{"prompt_tokens": NaN, "completion_tokens": 1}'),
    "infinity": lambda: _usage('{"prompt_tokens": Infinity, "completion_tokens": -Infinity}'),
    "overflow": lambda: _usage('{"prompt_tokens": 1e999, "completion_tokens": 1}'),
    "negative": lambda: _usage('{"prompt_tokens": -1000000000000, "completion_tokens": 1}'),
    "negative_cached": lambda: _usage('{"prompt_tokens": 4, "prompt_tokens_details": {"cached_tokens": -7}}'),
}
"""Hostile streamed answers of /v1/completions (HTTP 200, SSE)."""

ECHO = "echo_auth"
"""/v1/completions answers 400 with the request's Authorization header echoed in the body (and a header)."""

KEY_ENCODINGS: dict[str, Callable[[str], str]] = {
    "raw": lambda k: k,
    "json": lambda k: json.dumps(json.dumps({"key": k}))[1:-1],
    "url": lambda k: quote(f"key={k}&x=1", safe=""),
    "base64": lambda k: base64.b64encode(k.encode()).decode(),
    "base64_header": lambda k: base64.b64encode(f"Authorization: Bearer {k}".encode()).decode(),
    "hex": lambda k: k.encode().hex(),
    "HEX": lambda k: k.encode().hex().upper(),
}
"""How an `echo_key:<name>` answer spells the API key it received: no `Authorization`/`Bearer` word
in clear next to it, so only knowing the key's own spellings can hide it."""


@dataclass
class Hostile:
    url: str
    modes: dict[str, str] = field(default_factory=dict)  # path -> mode
    seen: int = 0  # hostile answers sent
    api_key: str | None = None  # the key the server accepts (a careless one may expose it)

    def set(self, path: str, mode: str | None) -> None:
        if mode is None:
            self.modes.pop(path, None)
        else:
            self.modes[path] = mode


HOSTILE = web.AppKey("hostile", Hostile)
UPSTREAM = web.AppKey("upstream", str)


async def _forward(request: web.Request) -> web.Response:
    headers = {k: v for k, v in request.headers.items() if k.lower() in ("authorization", "content-type", "accept")}
    async with (
        aiohttp.ClientSession() as s,
        s.request(
            request.method, request.app[UPSTREAM] + request.path_qs, data=await request.read(), headers=headers
        ) as r,
    ):
        body = await r.read()
        ctype = r.headers.get("Content-Type", "application/octet-stream")
        return web.Response(body=body, status=r.status, headers={"Content-Type": ctype})


async def _handle(request: web.Request) -> web.StreamResponse:
    h = request.app[HOSTILE]
    mode = h.modes.get(request.path)
    if mode is None:
        return await _forward(request)
    h.seen += 1
    auth = request.headers.get("Authorization", "")
    if mode == ECHO:
        body = json.dumps({"error": {"message": f"bad request; you sent Authorization: {auth}", "auth": auth}})
        return web.Response(status=400, text=body, headers={"Content-Type": "application/json", "X-Echo": auth})
    if mode.startswith("echo_key:"):
        key = auth.removeprefix("Bearer ")
        said = KEY_ENCODINGS[mode.partition(":")[2]](key)
        body = json.dumps({"error": {"message": f"model refused: {said}", "detail": said}})
        return web.Response(status=400, text=body, headers={"Content-Type": "application/json", "X-Echo": said})
    if mode == "deep_json":  # a GET answered with a 100k-deep JSON
        return web.Response(text="[" * DEEP + "]" * DEEP, content_type="application/json")
    if mode == "models_object":
        return web.json_response({"data": {"id": "m"}})
    if mode == "metrics_echo":  # /metrics is read without the key: this server exposes its own
        upstream = await _forward(request)
        assert upstream.body is not None and isinstance(upstream.body, bytes)
        extra = f'# HELP vllm:echo Authorization: Bearer {h.api_key}\n# TYPE vllm:echo gauge\nvllm:echo{{key="{h.api_key}"}} 1\n'
        return web.Response(body=upstream.body + extra.encode(), headers={"Content-Type": "text/plain"})
    await request.read()
    return web.Response(body=STREAMS[mode](), headers={"Content-Type": "text/event-stream"})


@asynccontextmanager
async def hostile_vllm(api_key: str | None = None, **sim: object) -> AsyncIterator[Hostile]:
    """A simulator behind a hostile front, both on loopback; yields the front's handle."""
    runner, upstream = await start(Simulator(SimOptions(time_scale=0.2, seed=5, api_key=api_key, **sim)))  # type: ignore[arg-type]
    app = web.Application()
    app[UPSTREAM] = upstream
    app[HOSTILE] = h = Hostile("", api_key=api_key)
    app.router.add_route("*", "/{tail:.*}", _handle)
    front = web.AppRunner(app, access_log=None)
    await front.setup()
    site = web.TCPSite(front, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    h.url = f"http://127.0.0.1:{port}"
    try:
        yield h
    finally:
        await front.cleanup()
        await runner.cleanup()

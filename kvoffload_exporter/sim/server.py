"""The simulator's HTTP face (aiohttp): vLLM's OpenAI endpoints, `/metrics`, and `/_sim/*` admin.

Endpoints: GET /health, /version, /v1/models, /metrics; POST /v1/completions (SSE or JSON);
GET/POST /_sim/faults, GET /_sim/state. A completion really waits for its modelled TTFT
(scaled by `time_scale`) before the first SSE event, so client-side TTFT is realistic.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import logging
from collections.abc import Awaitable, Callable

from aiohttp import web

from kvoffload_exporter.sim import protocol
from kvoffload_exporter.sim.engine import Engine, SimRequest
from kvoffload_exporter.sim.faults import FAULTS, FaultError
from kvoffload_exporter.sim.protocol import ApiError, Completion
from kvoffload_exporter.sim.simulator import Simulator, pad, truncate

SIMULATOR = web.AppKey("simulator", Simulator)
CONTENT_TYPE = "text/plain; version=1.0.0; charset=utf-8"  # prometheus_client 0.26, as vLLM sends it
ADMIN = "/_sim/"
log = logging.getLogger("kvoffload.sim")

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def _json_error(err: ApiError) -> web.Response:
    return web.json_response(err.body(), status=err.status)


@web.middleware
async def _faults_and_auth(request: web.Request, handler: Handler) -> web.StreamResponse:
    sim = request.app[SIMULATOR]
    if "down" in sim.faults and not request.path.startswith(ADMIN):
        if request.transport is not None:
            request.transport.close()  # the client sees the connection drop, no HTTP answer
        return web.Response(status=503)  # never delivered: the transport is gone
    key = sim.opts.api_key
    guarded = key and request.method != "OPTIONS" and request.path.startswith(sim.behaviour.api_key_prefixes)
    if guarded and not _authorised(
        request.headers.get("Authorization", ""), str(key), sim.behaviour.case_sensitive_bearer
    ):
        return web.json_response({"error": "Unauthorized"}, status=401)
    return await handler(request)


def _authorised(header: str, key: str, case_sensitive: bool) -> bool:
    if case_sensitive:  # 0.10: exact string match
        return header == f"Bearer {key}"
    scheme, _, token = header.partition(" ")
    return scheme.lower() == "bearer" and hmac.compare_digest(token.encode(), key.encode())


async def _health(request: web.Request) -> web.Response:
    return web.Response(status=200)


async def _version(request: web.Request) -> web.Response:
    return web.json_response({"version": request.app[SIMULATOR].behaviour.text})


async def _models(request: web.Request) -> web.Response:
    sim = request.app[SIMULATOR]
    return web.json_response(
        protocol.models_body(sim.model, f"/models/{sim.model}", sim.config.max_model_len, int(sim.started))
    )


async def _metrics(request: web.Request) -> web.Response:
    sim = request.app[SIMULATOR]
    if "metrics-500" in sim.faults:
        return web.Response(status=500, text="Internal Server Error")
    slow = sim.fault("metrics-slow")
    if slow is not None:
        await asyncio.sleep(slow.number())
    text = sim.metrics_text()
    if "metrics-truncated" in sim.faults:
        text = truncate(text)
    huge = sim.fault("metrics-huge")
    if huge is not None:
        text = pad(text, int(huge.number()))
    return web.Response(body=text.encode(), headers={"Content-Type": CONTENT_TYPE})


def _rank(request: web.Request) -> int | None:
    raw = request.headers.get("X-data-parallel-rank")
    if raw is None or not request.app[SIMULATOR].behaviour.dp_rank_header:
        return None
    try:
        return int(raw)
    except ValueError:
        raise ApiError(400, f"Invalid X-data-parallel-rank header: {raw!r}") from None


async def _completions(request: web.Request) -> web.StreamResponse:
    sim = request.app[SIMULATOR]
    refuse = sim.fault("completions-status")
    if refuse is not None:  # before the body is read: a gateway or a server that refuses every request
        status = int(refuse.number())
        return _json_error(ApiError(status, f"simulated fault: every completion is answered {status}"))
    try:
        c, engine = await _admit(request, sim)
    except ApiError as e:
        return _json_error(e)
    if c.kv_transfer_params is not None and not engine.connector:
        log.warning("Got kv_transfer_params, but no KVConnector found. Disabling KVTransfer for this request.")
    plan = engine.submit(_sim_request(c))
    details = sim.opts.prompt_tokens_details
    use = protocol.usage(plan.prompt_tokens, plan.max_tokens, plan.cached, details, sim.behaviour)
    metrics = (
        engine.response_metrics(plan) if sim.opts.per_request_metrics and sim.behaviour.per_request_metrics else None
    )
    ids = list(plan.output_ids)
    if not c.stream:
        await _sleep_until(sim, plan.client_time(plan.max_tokens - 1))
        return web.json_response(protocol.completion_body(c, sim.model, ids, use, metrics))
    resp = web.StreamResponse(headers={"Content-Type": "text/event-stream; charset=utf-8"})
    await resp.prepare(request)
    try:
        for i, tok in enumerate(ids):
            await _sleep_until(sim, plan.client_time(i))  # the first event really waits for the modelled TTFT
            event = protocol.token_chunk(c, sim.model, [tok], "length" if i == len(ids) - 1 else None, first=i == 0)
            if c.include_usage and c.continuous_usage:
                event["usage"] = protocol.usage(plan.prompt_tokens, i + 1, plan.cached, details, sim.behaviour)
            await _send(resp, event)
        if c.include_usage:
            await _send(resp, protocol.usage_chunk(c, sim.model, use, metrics))
        await resp.write(b"data: [DONE]\n\n")
        await resp.write_eof()
    except ConnectionResetError:
        # The client went away mid-stream (Ctrl-C of `demo`/`simulate`, a cancelled canary): vLLM aborts
        # such a request quietly; letting it escape made aiohttp log a traceback at every such shutdown.
        log.debug("client disconnected during a streamed completion")
    return resp


async def _admit(request: web.Request, sim: Simulator) -> tuple[Completion, Engine]:
    """Parse and validate the request and pick its engine; raises ApiError like vLLM would answer."""
    try:
        body = await request.json()
    except (json.JSONDecodeError, UnicodeDecodeError, RecursionError):  # RecursionError: a 100k-deep body
        raise ApiError(400, "JSON decode error") from None
    c = protocol.parse_completion(body, sim.behaviour, sim.model, sim.config.max_model_len, int(sim.wall()))
    try:
        return c, sim.pick(_rank(request))
    except ValueError as e:
        raise ApiError(400, str(e)) from None


def _sim_request(c: Completion) -> SimRequest:
    return SimRequest(
        prompt=c.prompt_ids,
        max_tokens=c.max_tokens,
        cache_salt=c.cache_salt,
        kv_transfer_params=c.kv_transfer_params,
        skip_prefix_cache=c.skip_prefix_cache,
    )


async def _sleep_until(sim: Simulator, t: float) -> None:
    """Sleep until simulated time `t`, in wall seconds scaled by `time_scale`."""
    delay = (t - sim.clock()) * sim.opts.time_scale
    if delay > 0:
        await asyncio.sleep(delay)


async def _send(resp: web.StreamResponse, event: dict[str, object]) -> None:
    await resp.write(b"data: " + json.dumps(event, separators=(",", ":")).encode() + b"\n\n")


async def _faults_get(request: web.Request) -> web.Response:
    sim = request.app[SIMULATOR]
    return web.json_response({"active": sim.faults.names(), "available": FAULTS})


async def _faults_post(request: web.Request) -> web.Response:
    sim = request.app[SIMULATOR]
    try:
        body = await request.json()
        if not isinstance(body, dict) or set(body) - {"add", "remove"}:
            raise FaultError('body must be {"add": [...], "remove": [...]}')
        add, remove = body.get("add") or [], body.get("remove") or []
        if not isinstance(add, list) or not isinstance(remove, list):
            raise FaultError("add and remove must be lists of fault names")
        active = sim.update_faults(add=[str(a) for a in add], remove=[str(r) for r in remove])
    except (FaultError, json.JSONDecodeError) as e:
        return web.json_response({"error": str(e)}, status=400)
    except (UnicodeDecodeError, RecursionError):
        return web.json_response({"error": "JSON decode error"}, status=400)
    return web.json_response({"active": active})


async def _state(request: web.Request) -> web.Response:
    return web.json_response(request.app[SIMULATOR].state())


def make_app(sim: Simulator) -> web.Application:
    """App factory: the simulator is created by the caller (so tests can inject clocks)."""
    app = web.Application(middlewares=[_faults_and_auth])
    app[SIMULATOR] = sim
    app.router.add_get("/health", _health)
    app.router.add_get("/version", _version)
    app.router.add_get("/v1/models", _models)
    app.router.add_get("/metrics", _metrics)
    app.router.add_post("/v1/completions", _completions)
    app.router.add_get(ADMIN + "faults", _faults_get)
    app.router.add_post(ADMIN + "faults", _faults_post)
    app.router.add_get(ADMIN + "state", _state)
    return app


async def start(sim: Simulator, host: str = "127.0.0.1", port: int = 0) -> tuple[web.AppRunner, str]:
    """Start serving `sim`; returns the runner (call `cleanup()`) and the base URL actually bound."""
    runner = web.AppRunner(make_app(sim), access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, host, port)
    try:
        await site.start()
    except OSError:
        await runner.cleanup()
        raise
    bound_host, bound_port = runner.addresses[0][:2]
    shown = f"[{bound_host}]" if ":" in bound_host else bound_host
    return runner, f"http://{shown}:{bound_port}"

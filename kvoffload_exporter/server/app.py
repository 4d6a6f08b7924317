"""The exporter's HTTP face: `/metrics` from memory (gzip, OpenMetrics or text 0.0.4 as the scraper
asks), `/probe` for one allowed target, `/healthz`, `/-/healthy`, `/-/ready`, a landing page at `/`."""

from __future__ import annotations

import gzip
import html
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass

import aiohttp
from aiohttp import web
from aiohttp.typedefs import Handler, Middleware

from kvoffload_exporter import __version__
from kvoffload_exporter.config.settings import Config
from kvoffload_exporter.expose.render import (
    CONTENT_TYPE,
    OPENMETRICS_CONTENT_TYPE,
    accepts_gzip,
    merge,
    wants_openmetrics,
)
from kvoffload_exporter.redact import redact_url
from kvoffload_exporter.server.exporter import Exporter
from kvoffload_exporter.server.guards import GuardStats
from kvoffload_exporter.server.pluginhost import ExporterHost
from kvoffload_exporter.server.plugins import Plugin
from kvoffload_exporter.server.probe import BadProbe, Forbidden, Probes
from kvoffload_exporter.sources.vllm_http import PollClient


@dataclass
class Lifecycle:
    """`POST /-/reload` (exporter-toolkit's lifecycle API): None until `serve --web.enable-lifecycle` hands
    in the same reload SIGHUP runs; it answers whether the reload was applied."""

    reload: Callable[[], Awaitable[tuple[bool, str]]] | None = None  # (all parts applied, the answer)


EXPORTER = web.AppKey("exporter", Exporter)
LIFECYCLE = web.AppKey("lifecycle", Lifecycle)
PROBES = web.AppKey("probes", Probes)
GUARDS = web.AppKey("guards", GuardStats)


def _negotiate(request: web.Request) -> tuple[bool, bool]:
    """(OpenMetrics?, gzip?) from the Accept and Accept-Encoding headers."""
    return wants_openmetrics(request.headers.get("Accept", "")), accepts_gzip(
        request.headers.get("Accept-Encoding", "")
    )


async def _respond(
    request: web.Request, body: Callable[[bool], bytes], gzipped: Callable[[bool], Awaitable[bytes]]
) -> web.Response:
    om, gz = _negotiate(request)
    headers = {"Content-Type": OPENMETRICS_CONTENT_TYPE if om else CONTENT_TYPE, "Vary": "Accept, Accept-Encoding"}
    if gz:
        headers["Content-Encoding"] = "gzip"
        return web.Response(body=await gzipped(om), headers=headers)
    return web.Response(body=body(om), headers=headers)


async def _metrics(request: web.Request) -> web.Response:
    exp = request.app[EXPORTER]
    return await _respond(request, exp.exposition, exp.gzip_exposition)


async def _probe(request: web.Request) -> web.Response:
    url = request.query.get("target", "")
    if not url:
        return web.Response(status=400, text="missing ?target=URL\n")
    exp = request.app[EXPORTER]
    try:
        poller = await request.app[PROBES].probe(url, request.query.get("name", ""), _session(exp))
    except BadProbe as e:
        return web.Response(status=400, text=f"{e}\n")
    except Forbidden:
        return web.Response(status=403, text="target not allowed (configure it or add it to probe.allow)\n")

    def body(om: bool) -> bytes:
        return merge([poller.fragment], om).encode()

    async def gzipped(om: bool) -> bytes:
        return gzip.compress(body(om), 6)  # one target: small

    return await _respond(request, body, gzipped)


def _session(exp: Exporter) -> PollClient:
    if exp.poll_client is None:
        raise web.HTTPServiceUnavailable(text="not started\n")
    return exp.poll_client


async def _healthz(request: web.Request) -> web.Response:
    return web.Response(text="ok\n")


def _cross_site(request: web.Request) -> bool:
    """A browser's request from another page (CSRF): an `Origin` other than this host, or `Sec-Fetch-Site`
    other than same-origin/none (browsers send both on a cross-origin form post). Without a web config
    nothing else stops a page the operator visits from reloading the exporter; curl's and scripts'
    `POST /-/reload` carry neither."""
    origin = request.headers.get("Origin")
    if origin is not None and origin.partition("://")[2] != request.host:
        return True
    return request.headers.get("Sec-Fetch-Site", "none") not in ("same-origin", "none")


async def _reload(request: web.Request) -> web.Response:
    """The SIGHUP reload over HTTP, only with --web.enable-lifecycle: 200 when every part applied, 500 when a
    file was refused (its running part is kept, as on SIGHUP); one answer line per part (targets, web config)."""
    reload = request.app[LIFECYCLE].reload
    if reload is None:
        return web.Response(status=403, text="lifecycle APIs are not enabled (serve --web.enable-lifecycle)\n")
    if _cross_site(request):
        return web.Response(status=403, text="cross-origin reload refused (send it without a browser)\n")
    ok, text = await reload()
    return web.Response(status=200 if ok else 500, text=text)


async def _ready(request: web.Request) -> web.Response:
    if request.app[EXPORTER].ready:
        return web.Response(text="ready\n")
    return web.Response(status=503, text="first poll round not done\n")


async def _index(request: web.Request) -> web.Response:
    exp = request.app[EXPORTER]
    rows = []
    for t in exp.targets:
        v = t.view
        shown = sorted(v.derived.items()) if v.up else []
        states = ", ".join(f"{m}/{e}: {d.state if d.state_known else 'unknown'}" for (m, e), d in shown)
        rows.append(
            "<tr>"
            + "".join(
                f"<td>{html.escape(str(c))}</td>"
                for c in (
                    v.label,
                    redact_url(v.url),
                    "up" if v.up else f"down ({v.last_error or 'not polled yet'})",
                    v.version or "",
                    v.snapshot.generation if v.snapshot else "",
                    states,
                )
            )
            + "</tr>"
        )
    body = (
        f"<!doctype html><html><head><title>kvoffload-exporter</title></head><body>"
        f"<h1>kvoffload-exporter {html.escape(__version__)}</h1>"
        f"<p><a href='{html.escape(exp.config.telemetry_path)}'>{html.escape(exp.config.telemetry_path)}</a> · "
        f"<a href='/healthz'>/healthz</a> · <a href='/-/ready'>/-/ready</a> · window "
        f"{html.escape(exp.config.window_label)}</p><table border='1' cellpadding='4'>"
        f"<tr><th>target</th><th>url</th><th>status</th><th>vLLM</th><th>generation</th>"
        f"<th>state per engine</th></tr>{''.join(rows)}</table></body></html>"
    )
    return web.Response(text=body, content_type="text/html")


def _trust_answered(guards: GuardStats) -> Middleware:
    """Outermost: an address answered with a success (past basic auth, when on) is a scraper seen before,
    for which the listener keeps a reserve of slots."""

    @web.middleware
    async def middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
        response = await handler(request)
        if response.status < 400:
            guards.trust(request.remote)
        return response

    return middleware


def make_app(
    config: Config,
    plugins: tuple[Plugin, ...] = (),
    exporter: Exporter | None = None,
    middlewares: Sequence[Middleware] = (),
    guards: GuardStats | None = None,
) -> web.Application:
    """App factory: nothing starts at import; polling starts on app startup and stops on cleanup.

    `plugins` get the running Exporter (as an ExporterHost) and the shared HTTP session (the canary uses this);
    `middlewares` guard every route (webconfig's basic auth); `guards` counts what they and the listener
    refuse (kvoffload_exporter_http_*)."""
    guards = guards or GuardStats()
    app = web.Application(middlewares=(_trust_answered(guards), *middlewares))
    app[EXPORTER] = exporter or Exporter(config)
    app[GUARDS] = guards
    app[EXPORTER].add_collector(app[GUARDS])
    app[PROBES] = Probes(app[EXPORTER], app[GUARDS])
    app[LIFECYCLE] = Lifecycle()

    async def lifecycle(app: web.Application) -> AsyncIterator[None]:
        exp = app[EXPORTER]
        # The plugins' session (the polls have their own keep-alive client, started and closed by `exp`);
        # no cookie jar: a cookie one target sets is never sent to another (nor back to it)
        async with aiohttp.ClientSession(read_bufsize=1 << 20, cookie_jar=aiohttp.DummyCookieJar()) as session:
            exp.start(session)
            exp.add_task(app[PROBES].sweep_forever())
            for plugin in plugins:
                plugin(ExporterHost(exp), session)
            yield
            await exp.stop()

    app.cleanup_ctx.append(lifecycle)
    app.router.add_get(config.telemetry_path, _metrics)
    app.router.add_get("/probe", _probe)
    app.router.add_get("/healthz", _healthz)
    app.router.add_get("/-/healthy", _healthz)
    app.router.add_get("/-/ready", _ready)
    app.router.add_post("/-/reload", _reload)  # GET and other methods: 405
    app.router.add_get("/", _index)
    return app

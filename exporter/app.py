"""The exporter's HTTP face: `/metrics` from memory, `/healthz`, and a landing page at `/`."""

from __future__ import annotations

import html
from collections.abc import AsyncIterator, Sequence

import aiohttp
from aiohttp import web
from aiohttp.typedefs import Middleware

from exporter import __version__
from exporter.config import Config
from exporter.plugins import Plugin
from exporter.poller import Exporter
from exporter.redact import redact_url
from exporter.render import CONTENT_TYPE

EXPORTER = web.AppKey("exporter", Exporter)


async def _metrics(request: web.Request) -> web.Response:
    # Plain text 0.0.4 regardless of Accept: no content negotiation, so names are never re-escaped.
    return web.Response(body=request.app[EXPORTER].body, headers={"Content-Type": CONTENT_TYPE})


async def _healthz(request: web.Request) -> web.Response:
    return web.Response(text="ok\n")


async def _index(request: web.Request) -> web.Response:
    exp = request.app[EXPORTER]
    rows = []
    for t in exp.targets:
        v = t.view
        states = ", ".join(f"{m}/{e}: {d.state}" for (m, e), d in sorted(v.derived.items())) if v.up else ""
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
        f"<p><a href='/metrics'>/metrics</a> · <a href='/healthz'>/healthz</a> · window "
        f"{html.escape(exp.config.window_label)}</p><table border='1' cellpadding='4'>"
        f"<tr><th>target</th><th>url</th><th>status</th><th>vLLM</th><th>generation</th>"
        f"<th>state per engine</th></tr>{''.join(rows)}</table></body></html>"
    )
    return web.Response(text=body, content_type="text/html")


def make_app(
    config: Config,
    plugins: tuple[Plugin, ...] = (),
    exporter: Exporter | None = None,
    middlewares: Sequence[Middleware] = (),
) -> web.Application:
    """App factory: nothing starts at import; polling starts on app startup and stops on cleanup.

    `plugins` get the running Exporter and the shared HTTP session (the canary uses this);
    `middlewares` guard every route (webconfig's basic auth)."""
    app = web.Application(middlewares=tuple(middlewares))
    app[EXPORTER] = exporter or Exporter(config)

    async def lifecycle(app: web.Application) -> AsyncIterator[None]:
        exp = app[EXPORTER]
        # One persistent client; the per-request timeout and body cap live in the source.
        async with aiohttp.ClientSession(read_bufsize=1 << 20) as session:
            exp.start(session)
            for plugin in plugins:
                plugin(exp, session)
            yield
            await exp.stop()

    app.cleanup_ctx.append(lifecycle)
    app.router.add_get("/metrics", _metrics)
    app.router.add_get("/healthz", _healthz)
    app.router.add_get("/", _index)
    return app

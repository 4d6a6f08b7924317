"""`serve`: poll vLLM targets and serve the derived exposition on /metrics; SIGHUP reloads the config."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import signal
import socket
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from kvoffload_exporter.config.flags import add_flag, add_flags, deprecations, overrides
from kvoffload_exporter.config.limits import Limits
from kvoffload_exporter.config.schema import Where, apply
from kvoffload_exporter.config.settings import Config, ConfigError, TargetConfig, check, load_file, parse_targets
from kvoffload_exporter.server import eventloop, gctune, logs
from kvoffload_exporter.server.logbudget import LogBudget, held_back

if TYPE_CHECKING:
    from kvoffload_exporter.config.webconfig import WebConfig
    from kvoffload_exporter.expose.collector import SampleSink
    from kvoffload_exporter.server.exporter import Exporter
    from kvoffload_exporter.server.plugins import Plugin
    from kvoffload_exporter.server.webauth import WebReload

ORDER = 10
log = logging.getLogger("kvoffload")
_UNCHANGED = LogBudget()
"""Reloads that changed nothing: their line is within the log budget."""
_DEMO_FIELDS = ("listen", "poll_interval", "window", "timeout", "host_enabled", "gpu_enabled")


def add_exporter_arguments(p: argparse.ArgumentParser, defaults: Mapping[str, object] | None = None) -> None:
    """`demo`'s exporter flags, built from the Config declaration under demo's own names (and defaults)."""
    add_flags(p, Config, "demo", defaults=defaults, only=_DEMO_FIELDS)
    logs.add_arguments(p, "demo")


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser(
        "serve",
        help="poll vLLM /metrics and export offload evidence",
        description="Poll one or more vLLM servers and serve kvoffload_* metrics. Precedence: flags, then "
        "KVOFFLOAD_* environment variables, then --config.file, then defaults. SIGHUP reloads --config.file. "
        "Flags follow the exporter-toolkit style (--web.*, --log.*, --[no-]collector.*); the earlier spellings "
        "still work, hidden, and say which flag replaces them.",
    )
    p.add_argument(
        "--target",
        action="append",
        default=[],
        metavar="URL",
        help="vLLM base URL, e.g. http://127.0.0.1:8000 (repeatable; user:pass@ is used as basic auth but is "
        "visible to every local user in ps: prefer username + password_file in --config.file)",
    )
    add_flag(
        p,
        ["--config.file"],
        "config",
        old=["--config"],
        metavar="FILE",
        help="YAML config file (flags override it; SIGHUP reloads it)",
    )
    add_flag(
        p,
        ["--config.check"],
        "config_check",
        old=["--config-check"],
        switch=True,
        default=False,
        help="validate the configuration and exit",
    )
    p.add_argument(
        "--web.config.file",
        dest="web_config_file",
        metavar="FILE",
        help="exporter-toolkit web config (TLS, basic auth) protecting every endpoint",
    )
    p.add_argument(
        "--web.enable-lifecycle",
        dest="web_enable_lifecycle",
        action="store_true",
        help="enable POST /-/reload: the same reload as SIGHUP (403 without this flag)",
    )
    add_flags(p, Config, "serve")
    add_flags(p, Limits, "serve", section="limits")
    logs.add_arguments(p)
    from kvoffload_exporter.canary.plugin import add_arguments as add_canary_arguments

    add_canary_arguments(p)
    p.set_defaults(func=run)


def config_from_args(
    args: argparse.Namespace, environ: Mapping[str, str] | None = None, command: str = "serve"
) -> Config:
    """Config file first, then environment variables, then flags (`command`'s names in errors); every error
    is reported together."""
    from kvoffload_exporter.canary.plugin import apply_flags

    env = os.environ if environ is None else environ
    errors: list[str] = []
    cfg = Config()
    if getattr(args, "config", None):
        try:
            cfg = load_file(args.config, validate=False)  # cross-field checks after the flags
        except ConfigError as e:  # listed together with the flags' errors
            errors += e.errors
    changes = overrides(Config, args, command, errors, environ=env)
    limits = overrides(Limits, args, "serve", errors, section="limits", environ=env)
    if limits:  # the top-level caps; a target's own `limits:` in the file still wins
        changes["limits"] = apply(cfg.limits, limits)
    if getattr(args, "target", None):
        changes["targets"] = parse_targets(list(args.target), errors, Where("--target", dotted=False))
    canary = apply_flags(args, cfg.canary, errors, env)
    if errors:
        raise ConfigError(errors)
    cfg = apply(cfg, changes).with_section("canary", canary)
    check(cfg)
    return cfg


def bind(listen: str) -> socket.socket:
    """The listening socket, bound before anything starts so a bad address fails first, in one line."""
    from kvoffload_exporter.config.settings import split_listen

    host, port = split_listen(listen)
    family, type_, proto, _, addr = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)[0]
    sock = socket.socket(family, type_, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(addr)
        sock.listen(128)
    except OSError:
        sock.close()
        raise
    sock.setblocking(False)
    return sock


@dataclass
class ReloadStatus:
    """The collector of `kvoffload_exporter_config_last_reload_*`."""

    ok: bool = True
    last_success: float = 0.0
    parts: dict[str, bool] = field(default_factory=dict)  # the last reload's: "targets", "web config" -> applied

    def answer(self) -> str:
        """What `POST /-/reload` answers: one line per part, whether it applied or the running one is kept."""
        return "".join(
            f"{part}: {'reloaded' if ok else 'reload failed, the running one is kept (see the log)'}\n"
            for part, ok in self.parts.items()
        ) or ("reloaded\n" if self.ok else "reload failed: the running configuration is kept (see the log)\n")

    def collect(self, x: SampleSink) -> None:
        x.add("kvoffload_exporter_config_last_reload_successful", 1.0 if self.ok else 0.0, {})
        x.add("kvoffload_exporter_config_last_reload_success_timestamp_seconds", self.last_success, {})


RESTART_ONLY = ("listen", "telemetry_path", "sections", "host_enabled", "gpu_enabled", "event_loop")
"""Config fields a running exporter cannot change (its socket, its routes, its plugins, its collectors)."""
_RESTART_NAMES = {"sections": "plugin (canary) settings", "host_enabled": "host.enabled", "gpu_enabled": "gpu.enabled"}


def reload(
    args: argparse.Namespace, exporter: Exporter, status: ReloadStatus, parsed: Config | Exception | None = None
) -> None:
    """SIGHUP: re-read the file (flags still on top); an invalid one keeps the running config.
    `parsed`: the file as read off the event loop (kvoffload_exporter.server.reloader); None reads it here."""
    try:
        if isinstance(parsed, Exception):
            raise parsed
        new = parsed or config_from_args(args)
        if not new.targets and not (new.probe_allow or new.probe_allow_regex):
            raise ConfigError(["at least one target (or probe.allow) is required"])
    except (ConfigError, OSError, ValueError) as e:
        status.ok = False
        errors = e.errors if isinstance(e, ConfigError) else [str(e)]
        log.error("configuration reload failed, keeping the running one: %s", "; ".join(errors))
        exporter.render()
        return
    old = exporter.config
    fixed = {k: getattr(old, k) for k in RESTART_ONLY if getattr(new, k) != getattr(old, k)}
    if fixed:  # refused in one line; everything else applies to every target (Exporter.reload)
        names = ", ".join(_RESTART_NAMES.get(k, k) for k in fixed)
        log.warning("configuration reload: %s change only on restart; kept as they were", names)
        new = replace(new, **fixed)
    if old.canary.enabled and new.targets != old.targets:
        log.warning("configuration reload: the canary keeps probing the targets it started with until restart")
    changes = logs.reload_changes(old, new)
    exporter.reload(new)
    status.ok, status.last_success = True, exporter.clock()
    let, held = _UNCHANGED.allow("unchanged") if not any(changes.values()) else (True, 0)
    if let:  # a script POSTing /-/reload in a loop: one "nothing changed" line an interval, not one a POST
        msg = logs.reload_message(changes, len(new.targets)) + held_back(held)
        log.info(msg, extra={**changes, "targets": len(new.targets)})
    exporter.render()


@dataclass(frozen=True)
class _Prepared:
    cfg: Config
    plugins: tuple[Plugin, ...]
    web: WebConfig | None  # --web.config.file: TLS and basic auth on every endpoint
    summary: str


async def _serve(args: argparse.Namespace, prep: _Prepared, sock: socket.socket) -> int:
    from aiohttp import web

    from kvoffload_exporter.server.app import EXPORTER, LIFECYCLE, make_app
    from kvoffload_exporter.server.guards import GuardStats
    from kvoffload_exporter.server.listener import GuardedSite, ListenLimits
    from kvoffload_exporter.server.reloader import Reloader
    from kvoffload_exporter.server.webauth import AuthGate, WebReload

    cfg = prep.cfg
    started = time.monotonic()
    guards = GuardStats()
    gate = AuthGate(prep.web.users, guards) if prep.web else None  # present with a web config: reload may add users
    app = make_app(cfg, plugins=prep.plugins, middlewares=(gate.middleware,) if gate else (), guards=guards)
    exporter = app[EXPORTER]
    status = ReloadStatus(last_success=exporter.clock())
    exporter.add_collector(status)
    limits = ListenLimits(cfg.web_max_connections, cfg.web_header_timeout).within_descriptors()
    runner = web.AppRunner(app, access_log=None, handle_signals=False, **limits.runner_kwargs(guards))
    gctune.tune()  # before the first poll: all that is loaded by now is never walked again
    await runner.setup()
    ssl_context = prep.web.ssl_context if prep.web else None
    site = GuardedSite(runner, sock, guards, limits, ssl_context=ssl_context)
    site.healthz_open = lambda: gate is None or not gate.users  # with basic auth, /healthz needs it too
    await site.start()
    web_reload = WebReload(getattr(args, "web_config_file", None), prep.web, gate, site)
    reloader = Reloader(
        lambda: (_config_or_error(args), web_reload.parse()),
        lambda parsed: _apply_reload(args, exporter, status, web_reload, parsed),
    )
    if getattr(args, "web_enable_lifecycle", False):

        async def http_reload() -> tuple[bool, str]:
            reloader.trigger()
            await reloader.wait()
            return status.ok, status.answer()

        app[LIFECYCLE].reload = http_reload
    host, port = sock.getsockname()[:2]
    scheme = "https" if ssl_context else "http"
    stop = asyncio.Event()
    received: list[signal.Signals] = []
    loop = asyncio.get_running_loop()

    def on_signal(sig: signal.Signals) -> None:
        received.append(sig)
        stop.set()

    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, on_signal, sig)
    loop.add_signal_handler(signal.SIGHUP, reloader.trigger)
    # Said once the signals are handled: from this line on, Ctrl-C is a clean stop (exit 0), never 130.
    log.info(
        "listening on %s://%s:%d%s, %d target(s), event loop %s",
        *(scheme, host, port, cfg.telemetry_path, len(cfg.targets), eventloop.current()),
    )
    try:
        await stop.wait()
    finally:
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            with contextlib.suppress(NotImplementedError, RuntimeError):
                loop.remove_signal_handler(sig)
        await runner.cleanup()
        if gate is not None:
            gate.close()
        name = received[0].name if received else "none"
        up = time.monotonic() - started
        log.info(
            "shutting down on %s after %s up", name, _uptime(up), extra={"signal": name, "uptime_seconds": round(up, 3)}
        )
    return 0


def _uptime(seconds: float) -> str:
    s = int(seconds)
    return (
        f"{s // 3600}h{s // 60 % 60:02d}m{s % 60:02d}s"
        if s >= 3600
        else f"{s // 60}m{s % 60:02d}s"
        if s >= 60
        else f"{seconds:.1f}s"
    )


def _config_or_error(args: argparse.Namespace) -> Config | Exception:
    """Runs in the reload thread: the new config, or why there is none."""
    try:
        return config_from_args(args)
    except (ConfigError, OSError, ValueError) as e:
        return e


def _apply_reload(
    args: argparse.Namespace, exporter: Exporter, status: ReloadStatus, web_reload: WebReload, parsed: object
) -> None:
    """On the loop: the target config (as `reload`), then the web config (users, TLS certificate). The reload
    succeeded only if every part did: a refused web config (a bad hash, a deleted file, a TLS key that does
    not match) keeps the old users and certificate, so it must not read as success (HTTP answer, metric)."""
    before = status.last_success
    if isinstance(parsed, tuple):
        reload(args, exporter, status, parsed[0])
        status.parts = {"targets": status.ok}
        web = web_reload.apply(parsed[1])
        if web is not None:
            status.parts["web config"] = web
        if web is False:
            status.ok, status.last_success = False, before
            exporter.render()
    else:  # the thread itself failed
        reload(args, exporter, status, parsed if isinstance(parsed, Exception) else RuntimeError("reload"))
        status.parts = {"targets": status.ok}


def _prepare(args: argparse.Namespace) -> _Prepared:
    from kvoffload_exporter.canary import plugin as canary
    from kvoffload_exporter.config import webconfig

    cfg = config_from_args(args)
    if not cfg.targets and not (cfg.probe_allow or cfg.probe_allow_regex):  # probe-only replicas
        raise ConfigError(["at least one --target (or `targets:` or `probe.allow` in --config.file) is required"])
    settings = canary.settings_from_args(args, cfg)
    if settings and args.config_check:
        canary.check_files(settings)
    plugins = (canary.make_plugin(settings),) if settings and not args.config_check else ()
    summary = (
        f"{len(cfg.targets)} target(s), listen {cfg.listen}, poll {cfg.poll_interval:g}s, window {cfg.window_label}"
        + (f", canary {settings.effective_strategy}" if settings else "")
    )
    web = webconfig.load(args.web_config_file) if getattr(args, "web_config_file", None) else None
    return _Prepared(cfg, plugins, web, summary)


def run(args: argparse.Namespace) -> int:
    from kvoffload_exporter.canary.wire.secrets import SecretError
    from kvoffload_exporter.config.webconfig import WebConfigError
    from kvoffload_exporter.variables import renamed_variables, unknown_variables

    try:
        logs.setup(logs.from_args(args))
        for line in deprecations():  # a former flag spelling: which flag replaces it, in the log's format
            log.warning("%s", line)
        for line in renamed_variables(os.environ) + unknown_variables(os.environ):  # a former name; a typo
            log.warning("%s", line)
        prep = _prepare(args)
        _, make_loop = eventloop.factory(prep.cfg.event_loop)
    except (ConfigError, SecretError, WebConfigError, eventloop.LoopUnavailable) as e:
        print(f"kvoffload-exporter: {e}", file=sys.stderr)
        return 2
    if args.config_check:
        print(f"configuration OK: {prep.summary}")
        return 0
    try:
        sock = bind(prep.cfg.listen)
    except OSError as e:
        print(f"kvoffload-exporter serve: cannot listen on {prep.cfg.listen}: {e.strerror or e}", file=sys.stderr)
        return 1
    return eventloop.run(_serve(args, prep, sock), make_loop)


__all__ = ["TargetConfig", "add_exporter_arguments", "bind", "config_from_args", "register", "reload", "run"]

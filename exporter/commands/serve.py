"""`serve`: poll vLLM targets and serve the derived exposition on /metrics."""

from __future__ import annotations

import argparse
import logging
import sys
from dataclasses import replace

from exporter.config import Config, ConfigError, TargetConfig, check, load_file, positive_duration, split_listen

ORDER = 10


def add_exporter_arguments(p: argparse.ArgumentParser) -> None:
    """Flags shared by `serve` and `demo`."""
    p.add_argument("--poll-interval", metavar="SECONDS", help="seconds between polls of each target (default 5)")
    p.add_argument("--window", metavar="DURATION", help="sliding window for ratios and state (default 5m)")
    p.add_argument("--timeout", metavar="SECONDS", help="per-poll timeout (default 3)")
    p.add_argument("--no-host", action="store_true", help="disable the host-memory collector")
    p.add_argument("--no-gpu", action="store_true", help="disable the NVML GPU collector")
    p.add_argument("--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING", "ERROR"])


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser(
        "serve",
        help="poll vLLM /metrics and export offload evidence",
        description="Poll one or more vLLM servers and serve kvoffload_* metrics.",
    )
    p.add_argument(
        "--target",
        action="append",
        default=[],
        metavar="URL",
        help="vLLM base URL, e.g. http://127.0.0.1:8000 (repeatable)",
    )
    p.add_argument("--listen", metavar="HOST:PORT", help="listen address (default 127.0.0.1:9466)")
    p.add_argument("--config", metavar="FILE", help="YAML config file (flags override it)")
    p.add_argument("--config-check", action="store_true", help="validate the configuration and exit")
    p.add_argument(
        "--web.config.file",
        dest="web_config_file",
        metavar="FILE",
        help="exporter-toolkit web config (TLS, basic auth) protecting every endpoint",
    )
    add_exporter_arguments(p)
    from exporter.canary.plugin import add_arguments as add_canary_arguments

    add_canary_arguments(p)
    p.set_defaults(func=run)


def config_from_args(args: argparse.Namespace) -> Config:
    """Config file first, then flags on top; every error is reported together."""
    cfg = load_file(args.config) if getattr(args, "config", None) else Config()
    errors: list[str] = []
    changes: dict[str, object] = {}
    if getattr(args, "target", None):
        from exporter.config import from_mapping

        try:
            changes["targets"] = from_mapping({"targets": list(args.target)}, Config()).targets
        except ConfigError as e:
            errors += e.errors
    for flag, key in (("poll_interval", "poll_interval"), ("window", "window"), ("timeout", "timeout")):
        raw = getattr(args, flag, None)
        if raw is not None:
            try:
                changes[key] = positive_duration(raw)
            except ValueError as e:
                errors.append(f"--{flag.replace('_', '-')}: {e}")
    if getattr(args, "listen", None):
        try:
            split_listen(args.listen)
            changes["listen"] = args.listen
        except ValueError as e:
            errors.append(f"--listen: {e}")
    if getattr(args, "no_host", False):
        changes["host_enabled"] = False
    if getattr(args, "no_gpu", False):
        changes["gpu_enabled"] = False
    if errors:
        raise ConfigError(errors)
    cfg = replace(cfg, **changes)  # type: ignore[arg-type]
    check(cfg)
    return cfg


def run(args: argparse.Namespace) -> int:
    logging.basicConfig(level=args.log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    from exporter import webconfig
    from exporter.canary import plugin as canary
    from exporter.canary.secrets import SecretError

    try:
        cfg = config_from_args(args)
        if not cfg.targets and not (cfg.probe_allow or cfg.probe_allow_regex):  # probe-only replicas
            raise ConfigError(["at least one --target (or `targets:` or `probe.allow` in --config) is required"])
        canary_settings = canary.settings_from_args(args, cfg)
        plugins = (canary.make_plugin(canary_settings),) if canary_settings and not args.config_check else ()
        web_config = webconfig.load(args.web_config_file) if getattr(args, "web_config_file", None) else None
    except (ConfigError, SecretError, webconfig.WebConfigError) as e:
        print(f"kvoffload-exporter: {e}", file=sys.stderr)
        return 2
    if args.config_check:
        print(
            f"configuration OK: {len(cfg.targets)} target(s), listen {cfg.listen}, "
            f"poll {cfg.poll_interval}s, window {cfg.window_label}"
            + (f", canary {canary_settings.effective_strategy}" if canary_settings else "")
        )
        return 0
    from aiohttp import web

    from exporter.app import make_app

    host, port = cfg.listen_host_port
    logging.getLogger("kvoffload").info("listening on http://%s:%d/metrics, %d target(s)", host, port, len(cfg.targets))
    web.run_app(
        make_app(cfg, plugins=plugins, middlewares=web_config.middlewares if web_config else ()),
        host=host,
        port=port,
        ssl_context=web_config.ssl_context if web_config else None,
        print=None,
        access_log=None,
    )
    return 0


__all__ = ["TargetConfig", "add_exporter_arguments", "config_from_args", "register", "run"]

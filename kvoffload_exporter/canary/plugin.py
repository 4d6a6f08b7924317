"""`serve --canary.enabled`: flags, settings and the app plugin that runs one canary engine per target.

The plugin gets the exporter as a `plugins.PluginHost` and the shared HTTP session
(app.make_app(plugins=...)): it adds the `kvoffload_canary_*` samples as a collector, spawns each
engine's loop as an exporter task and reports the `canary` collector's health after every cycle. Only the
flags and settings are imported with `serve`; the engine and its collector when the canary is enabled.
"""

from __future__ import annotations

import argparse
import secrets
from collections.abc import Mapping

from kvoffload_exporter.canary.config import CanarySettings, check
from kvoffload_exporter.canary.wire.secrets import load_api_key, load_or_create_secret
from kvoffload_exporter.config.flags import add_flags, overrides
from kvoffload_exporter.config.schema import apply
from kvoffload_exporter.config.settings import Config, ConfigError
from kvoffload_exporter.enums import CollectorName
from kvoffload_exporter.server.plugins import Plugin, PluginHost, Session


def add_arguments(p: argparse.ArgumentParser) -> None:
    """`serve`'s canary flags, built from the CanarySettings declaration."""
    add_flags(p.add_argument_group("canary (opt-in: sends requests to the target)"), CanarySettings, "serve", "canary")


def apply_flags(
    args: argparse.Namespace, base: CanarySettings, errors: list[str], environ: Mapping[str, str] | None = None
) -> CanarySettings:
    """`base` (the config file's `canary:`) with the flags and KVOFFLOAD_CANARY_* given on top."""
    values = overrides(CanarySettings, args, "serve", errors, section="canary", environ=environ)
    if values.get("allow_pressure") and getattr(args, "canary_allow_pressure", None):
        values["strategy"] = "pressure"  # the flag's meaning: displace with fillers
    return apply(base, values)


def settings_from_args(args: argparse.Namespace, cfg: Config) -> CanarySettings | None:
    """Config file's `canary:` settings, flags on top; None when the canary is not enabled."""
    errors: list[str] = []
    settings = apply_flags(args, cfg.canary, errors)
    if errors:
        raise ConfigError(errors)
    check(settings)
    if not settings.enabled:
        return None
    if settings.control_target and len(cfg.targets) != 1:
        raise ConfigError(["canary.control_target: needs exactly one target"])
    return settings


def check_files(settings: CanarySettings) -> None:
    """`--config.check`: the API key file must be readable (the secret file is created on first use)."""
    load_api_key(settings.api_key_file, settings.api_key_env)


def make_plugin(settings: CanarySettings) -> Plugin:
    """Reads the secret and the API key now (errors surface at start-up, not in a task)."""
    secret = load_or_create_secret(settings.secret_file)
    api_key = load_api_key(settings.api_key_file, settings.api_key_env)

    def plugin(host: PluginHost, session: Session) -> None:
        from kvoffload_exporter.canary import schedule
        from kvoffload_exporter.canary.cycle.engine import CanaryEngine
        from kvoffload_exporter.canary.cycle.plan import Prompts
        from kvoffload_exporter.canary.expose import CanaryCollector
        from kvoffload_exporter.canary.wire.client import CanaryClient

        client = CanaryClient(session, api_key, request_timeout=settings.request_timeout)
        nonce = secrets.token_hex(4)
        # One nonce per engine: two targets never get the same prefixes or request ids.
        engines = [
            CanaryEngine(
                t.url,
                settings,
                client,
                Prompts(secret, f"{nonce}{i}", settings.id_range),
                label=t.label,
                control_url=settings.control_target,
                keep_records=False,
            )
            for i, t in enumerate(host.config.targets)
        ]
        host.add_collector(CanaryCollector(engines))

        def on_cycle() -> None:
            for e in engines:  # wait-ladder evictions and never-loaded revisits refine the state reasons
                host.report_facts(e.state.label, e.state.reason_facts())
            last = [e.cycles[-1] for e in engines if e.cycles]
            ok = not any(e.failing for e in engines)
            host.report_collector(CollectorName.CANARY, ok, max((c.finished - c.started for c in last), default=0.0))

        host.report_collector(CollectorName.CANARY, True, 0.0)
        for e in engines:
            host.spawn(schedule.supervise(e, on_cycle))

    return plugin


__all__ = ["add_arguments", "make_plugin", "settings_from_args"]

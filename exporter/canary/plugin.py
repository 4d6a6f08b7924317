"""`serve --canary`: flags, settings and the app plugin that runs one canary engine per target.

The plugin gets the exporter as a `plugins.PluginHost` and the shared HTTP session
(app.make_app(plugins=...)): it adds the `kvoffload_canary_*` samples as a collector, spawns each
engine's loop as an exporter task and reports the `canary` collector's health after every cycle.
"""

from __future__ import annotations

import argparse
import secrets
from typing import Any

from exporter.canary.config import CanarySettings, from_mapping
from exporter.canary.expose import CanaryCollector
from exporter.canary.secrets import load_api_key, load_or_create_secret
from exporter.config import Config, ConfigError
from exporter.enums import CollectorName
from exporter.plugins import Plugin, PluginHost, Session

_FLAGS = {  # flag dest → canary settings key
    "canary": "enabled",
    "canary_allow_pressure": "allow_pressure",
    "canary_budget_tokens_per_hour": "budget_tokens_per_hour",
    "canary_interval": "interval",
    "canary_control_target": "control_target",
    "canary_prefix_tokens": "prefix_tokens",
    "canary_chunk_tokens": "chunk_tokens",
    "api_key_file": "api_key_file",
    "canary_secret_file": "secret_file",
}


def add_arguments(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("canary (opt-in: sends requests to the target)")
    g.add_argument(
        "--canary",
        action="store_true",
        default=None,
        help="run closed-loop offload canaries against every target (wait strategy unless --canary-allow-pressure)",
    )
    g.add_argument(
        "--canary-allow-pressure",
        action="store_true",
        default=None,
        help="displace canary prefixes with filler requests: evicts users' GPU cache, staging only",
    )
    g.add_argument(
        "--canary-budget-tokens-per-hour",
        type=int,
        metavar="N",
        help="hard cap on canary prompt + output tokens per hour and target (default 200000)",
    )
    g.add_argument("--canary-interval", metavar="DURATION", help="time between canary cycles (default 5m)")
    g.add_argument(
        "--canary-control-target", metavar="URL", help="the same model without the offload connector (one target only)"
    )
    g.add_argument("--canary-prefix-tokens", type=int, metavar="N", help="canary prefix length (default: automatic)")
    g.add_argument("--canary-chunk-tokens", type=int, metavar="N", help="offload chunk size if vLLM does not export it")
    g.add_argument("--canary-secret-file", metavar="FILE", help="persisted salt secret (created on first use)")
    g.add_argument("--api-key-file", metavar="FILE", help="vLLM API key for the canary (else $KVOFFLOAD_API_KEY)")


def settings_from_args(args: argparse.Namespace, cfg: Config) -> CanarySettings | None:
    """Config file's `canary:` mapping, flags on top; None when the canary is not enabled."""
    raw: dict[str, Any] = dict(cfg.canary)
    for dest, key in _FLAGS.items():
        v = getattr(args, dest, None)
        if v is not None:
            raw[key] = v
    if raw.get("allow_pressure") and "strategy" not in raw:
        raw["strategy"] = "pressure"
    settings = from_mapping(raw)
    if not settings.enabled:
        return None
    if settings.control_target and len(cfg.targets) != 1:
        raise ConfigError(["canary.control_target: needs exactly one target"])
    return settings


def make_plugin(settings: CanarySettings) -> Plugin:
    """Reads the secret and the API key now (errors surface at start-up, not in a task)."""
    secret = load_or_create_secret(settings.secret_file)
    api_key = load_api_key(settings.api_key_file, settings.api_key_env)

    def plugin(host: PluginHost, session: Session) -> None:
        from exporter.canary.client import CanaryClient
        from exporter.canary.engine import CanaryEngine
        from exporter.canary.plan import Prompts

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
            last = [e.cycles[-1] for e in engines if e.cycles]
            ok = not any(e.failing for e in engines)
            host.report_collector(CollectorName.CANARY, ok, max((c.finished - c.started for c in last), default=0.0))

        host.report_collector(CollectorName.CANARY, True, 0.0)
        for e in engines:
            host.spawn(e.run_forever(on_cycle))

    return plugin


__all__ = ["add_arguments", "make_plugin", "settings_from_args"]

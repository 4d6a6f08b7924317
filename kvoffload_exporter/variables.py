"""Every setting section and every `KVOFFLOAD_*` variable the exporter reads: one list for the configuration
page (configdoc) and for `serve`'s warning about a variable nothing reads."""

from __future__ import annotations

import difflib
from collections.abc import Mapping

from kvoffload_exporter.canary.config import CanarySettings
from kvoffload_exporter.config.limits import Limits
from kvoffload_exporter.config.schema import ENV_PREFIX, env_name, old_env_names, specs
from kvoffload_exporter.config.settings import Config, TargetConfig
from kvoffload_exporter.server.logs import LogSettings

SECTIONS: tuple[tuple[str, type, str, str], ...] = (
    ("Exporter", Config, "", "top level of the file"),
    ("Targets", TargetConfig, "", "each entry of `targets:` (a bare URL is shorthand for `{url: URL}`)"),
    ("Canary", CanarySettings, "canary", "`canary:` (`canary: true` is shorthand for `{enabled: true}`)"),
    (
        "Limits",
        Limits,
        "limits",
        "`limits:` at the top level and in each target (a target's keys on top of the top-level ones); "
        "flags and environment set the top-level ones. Why they exist: [security.md](security.md)",
    ),
    ("Logging", LogSettings, "log", "flags and environment only"),
)


OTHER_VARIABLES = ("KVOFFLOAD_API_KEY", "KVOFFLOAD_HEALTHCHECK_URL", "KVOFFLOAD_EXPORTER_TAG")
"""Variables read outside the settings: the canary's API key (`canary.api_key_env`), the image's health
check, the compose file's image tag."""


def renamed() -> dict[str, str]:
    """{former name: variable} of the settings whose variable now follows the flag (KVOFFLOAD_WINDOW →
    KVOFFLOAD_STATE_WINDOW): the former names are still read."""
    return {
        old: env_name(section, f, spec)
        for _, cls, section, _ in SECTIONS
        for f, spec in specs(cls)
        if spec.env
        for old in old_env_names(section, f, spec)
    }


def variables() -> frozenset[str]:
    """Every `KVOFFLOAD_*` variable the exporter reads: the settings' (former names too) and OTHER_VARIABLES."""
    names = {env_name(section, f, spec) for _, cls, section, _ in SECTIONS for f, spec in specs(cls) if spec.env}
    return frozenset(names | set(renamed()) | set(OTHER_VARIABLES))


def renamed_variables(environ: Mapping[str, str]) -> list[str]:
    """One line per set variable under its former name, as a former flag spelling says it."""
    return [f"variable {old} is deprecated; use {new}" for old, new in renamed().items() if old in environ]


def unknown_variables(environ: Mapping[str, str]) -> list[str]:
    """One line per set `KVOFFLOAD_*` variable that nothing reads, with a did-you-mean where one is close
    (`KVOFFLOAD_WINDOWS=10m` was silently ignored)."""
    known, former = variables(), set(renamed())
    lines = []
    for name in sorted(n for n in environ if n.startswith(ENV_PREFIX) and n not in known):
        close = difflib.get_close_matches(name, sorted(known - former), n=1, cutoff=0.8)  # never a former name
        lines.append(f"{name} is not a kvoffload-exporter variable" + (f" (did you mean {close[0]}?)" if close else ""))
    return lines


__all__ = ["OTHER_VARIABLES", "SECTIONS", "renamed", "renamed_variables", "unknown_variables", "variables"]

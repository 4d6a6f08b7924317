"""Plugin sections of the config file: a plugin's own mapping (the canary's `canary:`) that the core
parses and checks with the rest of the file without importing the plugin. The plugin registers it when
its settings module is imported (`kvoffload_exporter.server.plugins` documents the seam); `Config.<key>` hands it back.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from kvoffload_exporter.config.schema import ConfigError


@dataclass(frozen=True)
class Section:
    """A plugin's own mapping of the config file (the canary's `canary:`), registered by the plugin with
    `register_section` so that the core parses and checks it without importing the plugin. `parse(raw,
    base)` validates the mapping on top of `base` and `check(settings, config)` the cross-field rules;
    both raise ConfigError. `section: true/false` is shorthand for `{enabled: ...}`."""

    key: str
    default: Callable[[], object]
    parse: Callable[[Any, Any], object]
    check: Callable[[Any, Any], None]  # (settings, Config)


SECTIONS: dict[str, Section] = {}
"""Registered plugin sections by key (kvoffload_exporter.server.plugins documents the seam)."""


def register_section(section: Section) -> None:
    """Make `section.key` a key of the config file; `Config.<key>` is then its parsed settings."""
    SECTIONS[section.key] = section


Sections = tuple[tuple[str, object], ...]
"""(key, settings) of each plugin section, as a Config holds them (hashable, like the rest of it)."""


def default_sections() -> Sections:
    return tuple((key, s.default()) for key, s in SECTIONS.items())


def section_value(sections: Sections, name: str) -> object:
    """The settings of section `name`: as parsed, else its defaults; AttributeError when unregistered."""
    for key, value in sections:
        if key == name:
            return value
    if name in SECTIONS:
        return SECTIONS[name].default()
    raise AttributeError(name)


def parse_sections(raw: Mapping[str, object], base: Any, errors: list[str]) -> Sections:
    """`base.sections` (a Config's) with each registered section of `raw` parsed on top (`key: true` is
    `{enabled: true}`); every problem is added to `errors`."""
    out = dict(base.sections)
    for key, section in SECTIONS.items():
        if key in raw:
            value = {"enabled": raw[key]} if isinstance(raw[key], bool) else raw[key]
            try:
                out[key] = section.parse(value, section_value(base.sections, key))
            except ConfigError as e:
                errors += e.errors
    return tuple(out.items())


def check_sections(config: Any, errors: list[str]) -> None:
    """Each registered section's cross-field rules against the whole Config; problems added to `errors`."""
    for key, section in SECTIONS.items():
        try:
            section.check(section_value(config.sections, key), config)
        except ConfigError as e:
            errors += e.errors


__all__ = [
    "SECTIONS",
    "Section",
    "Sections",
    "check_sections",
    "default_sections",
    "parse_sections",
    "register_section",
    "section_value",
]

"""Log settings (`--log.level`, `--log.format=text|logfmt|json`) and their handler.

Declared like every other setting (kvoffload_exporter.config.schema) so the flags, `KVOFFLOAD_LOG_*` and help agree."""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import os
import re
import sys
from dataclasses import dataclass
from datetime import UTC, datetime

from kvoffload_exporter.config.flags import add_flags, overrides
from kvoffload_exporter.config.schema import ConfigError, apply, choice, setting
from kvoffload_exporter.redact import redact_url, scrub

LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")


def _level(v: object, text: bool) -> object:
    return choice(*LEVELS)(str(v).upper(), text)


_level.choices = LEVELS  # type: ignore[attr-defined]


@dataclass(frozen=True)
class LogSettings:
    level: str = setting(
        "INFO",
        _level,
        "log level",
        flag="--log.level",
        old="--log-level",
        demo_flag=True,
        metavar="LEVEL",
    )
    format: str = setting(
        "text",
        choice("text", "logfmt", "json"),
        "log line format",
        flag="--log.format",
        demo_flag=True,
        metavar="FORMAT",
    )


FIELDS = ("target", "reason", "url", "error", "signal", "uptime_seconds", "added", "removed", "changed", "targets")
"""Structured fields a log call may pass (`extra={"target": ..., ...}`); JSON and logfmt lines carry them as
keys, `url` always redacted."""

_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def escape(text: str) -> str:
    """Control characters (CR, LF, ESC of ANSI sequences, ...) as visible escapes: one record is one line,
    and a label or body a target controls cannot rewrite the terminal or forge a line."""
    named = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}
    return _CONTROL.sub(lambda m: named.get(m.group(), f"\\x{ord(m.group()):02x}"), text)


def timestamp(record: logging.LogRecord) -> str:
    """RFC 3339 in UTC with milliseconds: `2026-12-02T04:49:06.123Z`."""
    t = datetime.fromtimestamp(record.created, tz=UTC)
    return t.strftime("%Y-%m-%dT%H:%M:%S.") + f"{t.microsecond // 1000:03d}Z"


def fields(record: logging.LogRecord) -> dict[str, object]:
    out: dict[str, object] = {}
    for k in FIELDS:
        v = getattr(record, k, None)
        if v is not None:
            v = redact_url(v) if k == "url" and isinstance(v, str) else v
            out[k] = scrub(v) if isinstance(v, str) else v
    return out


def message(record: logging.LogRecord) -> str:
    """The record's message without any secret the process knows, in any spelling (redact.scrub): the
    last guard at the log's exit, whatever a line quotes (an HTTP error, a redirect, a label)."""
    return scrub(record.getMessage())


class _Formatter(logging.Formatter):
    def formatException(self, ei: object) -> str:
        return scrub(super().formatException(ei))  # type: ignore[arg-type]


def _base(record: logging.LogRecord) -> dict[str, object]:
    return {
        "ts": timestamp(record),
        "level": record.levelname.lower(),
        "logger": record.name,
        "msg": message(record),
        **fields(record),
    }


class TextFormatter(_Formatter):
    """`<ts> LEVEL logger: message`, control characters escaped (a traceback keeps its lines)."""

    def format(self, record: logging.LogRecord) -> str:
        line = f"{timestamp(record)} {record.levelname} {record.name}: {escape(message(record))}"
        if record.exc_info:
            line += "\n" + self.formatException(record.exc_info)
        return line


class LogfmtFormatter(_Formatter):
    def format(self, record: logging.LogRecord) -> str:
        doc = _base(record)
        if record.exc_info:
            doc["exc"] = self.formatException(record.exc_info)
        return " ".join(f"{k}={_logfmt_value(v)}" for k, v in doc.items())


def _logfmt_value(v: object) -> str:
    if isinstance(v, (list, tuple)):
        v = ",".join(map(str, v))
    s = str(v)
    if s and not any(c in s for c in ' "=\\') and not _CONTROL.search(s):
        return s
    return '"' + escape(s.replace("\\", "\\\\").replace('"', '\\"')) + '"'


class JsonFormatter(_Formatter):
    """One JSON object per line (json escapes control characters itself)."""

    def format(self, record: logging.LogRecord) -> str:
        doc = _base(record)
        if record.exc_info:
            doc["exc"] = self.formatException(record.exc_info)
        return json.dumps(doc, sort_keys=False, default=str)


def reload_changes(old: object, new: object) -> dict[str, list[str]]:
    """What a configuration reload changed: targets added and removed (by label), and settings changed
    (top-level keys, and `targets[<label>]` for a target whose own keys changed)."""
    before = {t.label: t for t in getattr(old, "targets", ())}
    after = {t.label: t for t in getattr(new, "targets", ())}
    changed = [
        f.name
        for f in dataclasses.fields(new)  # type: ignore[arg-type]
        if f.name != "targets" and getattr(old, f.name, None) != getattr(new, f.name, None)
    ]
    changed += [f"targets[{k}]" for k in after if k in before and before[k] != after[k]]
    return {
        "added": [k for k in after if k not in before],
        "removed": [k for k in before if k not in after],
        "changed": changed,
    }


def reload_message(changes: dict[str, list[str]], targets: int) -> str:
    parts = [f"{what} {', '.join(names)}" for what, names in changes.items() if names]
    return f"configuration reloaded: {targets} target(s); " + ("; ".join(parts) if parts else "nothing changed")


def add_arguments(p: argparse.ArgumentParser, command: str = "serve") -> None:
    add_flags(p, LogSettings, command, section="log")


def from_args(args: argparse.Namespace, command: str = "serve") -> LogSettings:
    errors: list[str] = []
    values = overrides(LogSettings, args, command, errors, section="log", environ=os.environ)
    if errors:
        raise ConfigError(errors)
    return apply(LogSettings(), values)


def setup(settings: LogSettings) -> None:
    """Root handler on stderr in the chosen format (replacing any earlier one: demo, tests)."""
    handler = logging.StreamHandler(sys.stderr)
    formatter: logging.Formatter = {"logfmt": LogfmtFormatter(), "json": JsonFormatter()}.get(
        settings.format, TextFormatter()
    )
    handler.setFormatter(formatter)
    root = logging.getLogger()
    for h in list(root.handlers):
        if getattr(h, "_kvoffload", False):
            root.removeHandler(h)
    handler._kvoffload = True  # type: ignore[attr-defined]
    root.addHandler(handler)
    root.setLevel(settings.level)

"""Log settings (`--log-level`/`--log.level`, `--log.format=text|logfmt|json`) and their handler.

Declared like every other setting (exporter.schema) so the flags, `KVOFFLOAD_LOG_*` and help agree."""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from dataclasses import dataclass

from exporter.schema import ConfigError, add_flags, apply, choice, overrides, setting

LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")
_TEXT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


def _level(v: object, text: bool) -> object:
    return choice(*LEVELS)(str(v).upper(), text)


@dataclass(frozen=True)
class LogSettings:
    level: str = setting("INFO", _level, "log level", flag=("--log-level", "--log.level"), metavar="LEVEL")
    format: str = setting(
        "text", choice("text", "logfmt", "json"), "log line format", flag="--log.format", metavar="FORMAT"
    )


class LogfmtFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        fields = {
            "ts": self.formatTime(record, "%Y-%m-%dT%H:%M:%S"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        return " ".join(f"{k}={_logfmt_value(v)}" for k, v in fields.items())


def _logfmt_value(v: str) -> str:
    if v and not any(c in v for c in ' "=\n\\'):
        return v
    return '"' + v.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        doc = {
            "ts": self.formatTime(record, "%Y-%m-%dT%H:%M:%S"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        if record.exc_info:
            doc["exc"] = self.formatException(record.exc_info)
        return json.dumps(doc, sort_keys=False)


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_flags(p, LogSettings, "serve", section="log")


def from_args(args: argparse.Namespace) -> LogSettings:
    errors: list[str] = []
    values = overrides(LogSettings, args, "serve", errors, section="log", environ=os.environ)
    if errors:
        raise ConfigError(errors)
    return apply(LogSettings(), values)


def setup(settings: LogSettings) -> None:
    """Root handler on stderr in the chosen format (replacing any earlier one: demo, tests)."""
    handler = logging.StreamHandler(sys.stderr)
    formatter: logging.Formatter = {"logfmt": LogfmtFormatter(), "json": JsonFormatter()}.get(
        settings.format, logging.Formatter(_TEXT)
    )
    handler.setFormatter(formatter)
    root = logging.getLogger()
    for h in list(root.handlers):
        if getattr(h, "_kvoffload", False):
            root.removeHandler(h)
    handler._kvoffload = True  # type: ignore[attr-defined]
    root.addHandler(handler)
    root.setLevel(settings.level)

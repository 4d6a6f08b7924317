"""Command-line entry point: discovers sub-commands in `exporter.commands` and dispatches."""

from __future__ import annotations

import argparse
import importlib
import pkgutil
import sys
from collections.abc import Sequence

from exporter import __version__, commands


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="kvoffload-exporter",
        description="Prometheus exporter, canary and dashboards for vLLM KV-cache offloading.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    # Each module in exporter/commands/ registers one sub-command: new commands need no edit here.
    mods = [importlib.import_module(f"{commands.__name__}.{m.name}") for m in pkgutil.iter_modules(commands.__path__)]
    for mod in sorted(mods, key=lambda m: getattr(m, "ORDER", 100)):
        mod.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # `... | head` closed stdout early
        return 0


if __name__ == "__main__":
    sys.exit(main())

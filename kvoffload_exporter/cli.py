"""Command-line entry point: discovers sub-commands in `kvoffload_exporter.commands` and dispatches."""

from __future__ import annotations

import argparse
import difflib
import importlib
import logging
import pkgutil
import sys
from collections.abc import Sequence
from typing import Any, NoReturn

from kvoffload_exporter import __version__, commands
from kvoffload_exporter.config.flags import Flag, settle
from kvoffload_exporter.revision import revision


class Parser(argparse.ArgumentParser):
    """argparse with a one-line usage error (the full usage is one `--help` away), renamed flags settled
    (hidden former spellings: one notice each, or an error when they disagree) and no abbreviations: a
    misspelt `--web.listen-addres` is refused with a did-you-mean instead of silently matching a flag (an
    abbreviation that works today breaks the day a second flag shares its prefix). Sub-commands are built
    by the same class, so every parser refuses them."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def parse_known_args(self, args: Any = None, namespace: Any = None) -> Any:
        """argparse's, then the renamed flags settled: a former spelling that disagrees with its new one is
        a usage error; one that agrees is announced once (kvoffload_exporter.config.flags)."""
        parsed, rest = super().parse_known_args(args, namespace)
        self._command = getattr(parsed, "command", None)  # hints for a mistyped flag come from its command
        problem = settle(parsed)
        if problem:
            self.error(problem)
        return parsed, rest

    def error(self, message: str) -> NoReturn:
        # An unknown flag of a sub-command is reported by the top parser: point at that command's --help.
        command = getattr(self, "_command", None) if message.startswith("unrecognized arguments: ") else None
        prog = f"{self.prog} {command}" if command else self.prog
        self.exit(2, f"{prog}: error: {message}{self._suggest(message)} (see {prog} --help)\n")

    def _suggest(self, message: str) -> str:
        """ "did you mean …?" for each mistyped flag (argparse of Python < 3.14 has none)."""
        if not message.startswith("unrecognized arguments: "):
            return ""
        words = message.split(": ", 1)[1].split()
        # a hidden former spelling is hinted as the flag that replaces it (`--listn`: `--web.listen-address`)
        known: dict[str, str] = {}
        for a in (a for p in _parsers(self, getattr(self, "_command", None)) for a in p._actions):
            if a.help != argparse.SUPPRESS:
                known.update((o, o) for o in a.option_strings)
            elif isinstance(a, Flag):
                known.update(a.use)
        flags = list(dict.fromkeys(w.split("=", 1)[0] for w in words if w.startswith("--")))
        hints = {}
        for w in flags:
            close = difflib.get_close_matches(w, sorted(known), n=1, cutoff=0.75)
            if close:
                hints[w] = known[close[0]]
        if len(flags) == 1 and hints:
            return f" (did you mean {hints[flags[0]]}?)"
        said = [f"{w}: did you mean {hints[w]}?" if w in hints else f"{w}: no such flag" for w in flags]
        return f" ({'; '.join(said)})" if hints else ""


def _parsers(p: argparse.ArgumentParser, command: str | None = None) -> list[argparse.ArgumentParser]:
    """A parser and its sub-commands' (only `command`'s when it is one of them)."""
    found = [p]
    for a in p._actions:
        if isinstance(a, argparse._SubParsersAction):
            for name, sub in a.choices.items():
                if command in a.choices and name != command:
                    continue
                found += _parsers(sub)
    return found


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The CLI's parser. `command` (the first word of the command line): when it names a sub-command, only
    that command's module is imported and registered, so `serve` does not load the simulator, the canary
    check or the bundle (their modules are resident for the life of the process); otherwise every command is
    (the top-level help lists them)."""
    parser = Parser(
        prog="kvoffload-exporter",
        description="Prometheus exporter, canary and dashboards for vLLM KV-cache offloading.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__} (revision {revision()})")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    # Each module in kvoffload_exporter/commands/ registers one sub-command: new commands need no edit here.
    # A module registers the command of its own name (tests/test_import_graph.py checks it).
    names = [m.name for m in pkgutil.iter_modules(commands.__path__)]
    mods = [importlib.import_module(f"{commands.__name__}.{n}") for n in ([command] if command in names else names)]
    for mod in sorted(mods, key=lambda m: getattr(m, "ORDER", 100)):
        mod.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = build_parser(argv[0] if argv else None)
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help(sys.stderr)
        return 2
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # `... | head` closed stdout early
        return 0
    except Exception as e:  # last resort: bad input must never end in a traceback
        logging.getLogger("kvoffload").debug("unexpected error", exc_info=True)
        print(f"kvoffload-exporter {args.command}: {type(e).__name__}: {e}", file=sys.stderr)
        return 3


if __name__ == "__main__":
    sys.exit(main())

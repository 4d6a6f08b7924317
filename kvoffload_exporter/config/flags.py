"""Command-line flags from the settings declaration: each setting's flag for a command, `serve`'s former
spellings kept as hidden aliases, and the values read back.

A renamed flag keeps working so that unit files and scripts written for an earlier release still start.
It is hidden from --help (one spelling per setting there), says once per process which flag replaces it,
and is refused when it disagrees with its new spelling on the same command line (which of the two was
meant is a guess). Spellings are noted while argparse parses and settled once it is done (`settle`, called
by the CLI's parser), so a refused command line prints its one error line and nothing before it; the
notices wait for the command to log them (`deprecations`) in the log format it was given, so a JSON log
stream stays JSON.
"""

from __future__ import annotations

import argparse
from collections.abc import Collection, Mapping, Sequence
from dataclasses import MISSING, Field, dataclass
from typing import Any

from kvoffload_exporter.config.schema import Duration, Parser, described, env_name, old_env_names, seconds_text, specs

NOTES = "_kvoffload_flag_spellings"  # namespace attribute the flags note their spellings in, removed by settle()
WARNED: set[str] = set()  # former spellings already noticed in this process: one notice each
_PENDING: list[str] = []  # notices not yet logged


def flag_dest(section: str, f: Field[Any]) -> str:
    """Where a setting's flag stores its value: the field's name, under its section (`canary_interval`), so a
    command that spells the flag differently (`demo`) fills the same attribute."""
    return f"{section}_{f.name}" if section else f.name


def switch_values(name: str) -> dict[str, bool]:
    """What a boolean flag sets: `--[no-]x` is the pair `--x` (true) and `--no-x` (false), the exporter-toolkit
    way; `--no-x` alone sets false, any other name true."""
    if name.startswith("--[no-]"):
        base = name.removeprefix("--[no-]")
        return {f"--{base}": True, f"--no-{base}": False}
    return {name: not name.startswith("--no-")}


@dataclass(frozen=True)
class Given:
    """One flag on the command line: its value and, for a former spelling, the one that replaces it."""

    dest: str
    flag: str
    value: object
    use: str | None
    parse: Parser | None


class Flag(argparse.Action):
    """A flag (a value, or a switch whose spellings each set a constant) that notes the spelling it came by."""

    def __init__(
        self,
        option_strings: Sequence[str],
        dest: str,
        switch: Mapping[str, bool] | None = None,
        use: Mapping[str, str] | None = None,
        parse: Parser | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(option_strings, dest, nargs=0 if switch is not None else None, **kwargs)
        self.switch, self.use, self.parse = switch, dict(use or {}), parse

    def __call__(
        self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any, option: str | None = None
    ) -> None:
        flag = option or self.option_strings[0]
        value = self.switch[flag] if self.switch is not None else values
        setattr(namespace, self.dest, value)
        notes: list[Given] = namespace.__dict__.setdefault(NOTES, [])
        notes.append(Given(self.dest, flag, value, self.use.get(flag), self.parse))

    def format_usage(self) -> str:
        return " | ".join(self.option_strings)  # a switch pair in the usage line: [--collector.gpu | --no-...]


def add_flag(
    p: argparse.ArgumentParser | argparse._ArgumentGroup,
    names: Sequence[str],
    dest: str,
    *,
    old: Sequence[str] = (),
    switch: bool = False,
    parse: Parser | None = None,
    default: object = None,
    help: str | None = None,
    metavar: str | None = None,
) -> None:
    """One flag under `names` (a `--[no-]x` switch is the pair) and its former spellings, hidden. A former
    switch spelling keeps what it set: `--no-gpu` is `--no-collector.gpu`, `--canary` is `--canary.enabled`."""
    values = {k: v for n in names for k, v in switch_values(n).items()} if switch else None
    shown = list(values or names)
    # Any: keyword arguments of argparse's add_argument
    kw: dict[str, Any] = {"dest": dest, "action": Flag, "parse": parse}
    p.add_argument(*shown, switch=values, default=default, help=help, metavar=None if switch else metavar, **kw)
    for alias in old:
        was = switch_values(alias) if switch else None
        now = names[0]
        if values is not None and was is not None:
            now = next(n for n, v in values.items() if v == was[alias])
        p.add_argument(alias, switch=was, use={alias: now}, default=argparse.SUPPRESS, help=argparse.SUPPRESS, **kw)


def renamed(p: argparse.ArgumentParser) -> list[tuple[str, str]]:
    """(former spelling, current one) of every hidden alias of a parser, in its order (for the docs)."""
    return [(o, a.use[o]) for a in p._actions if isinstance(a, Flag) for o in a.option_strings if o in a.use]


def _same(a: Given, b: Given) -> bool:
    """Whether two spellings gave the same value (`5` and `5s` do), compared as the setting reads them."""
    if a.value == b.value:
        return True
    if a.parse is None:
        return False
    try:
        return bool(a.parse(a.value, True) == a.parse(b.value, True))
    except ValueError:
        return False


def settle(namespace: argparse.Namespace) -> str | None:
    """After parsing: a one-line error when a former and a current spelling disagree; else each former
    spelling used gets its notice, once per process (`deprecations`)."""
    notes: list[Given] = namespace.__dict__.pop(NOTES, [])
    for g in notes:
        if g.use is None:
            continue
        current = [n for n in notes if n.dest == g.dest and n.use is None]
        if current and not _same(g, current[-1]):
            c = current[-1]
            return (
                f"{g.flag} (deprecated spelling of {g.use}) and {c.flag} disagree "
                f"({_shown(g)} vs {_shown(c)}); give only {c.flag}"
            )
    for g in notes:
        if g.use is not None and g.flag not in WARNED:
            WARNED.add(g.flag)
            _PENDING.append(f"flag {g.flag} is deprecated; use {g.use}")
    return None


def renamed_value(flag: str, old: str, new: str) -> str:
    """`new`, for a flag value given by its former spelling `old` (a choice renamed, like a simulator backend
    to the exporter's name for it): noticed once per process like a former flag spelling (`deprecations`)."""
    if f"{flag} {old}" not in WARNED:
        WARNED.add(f"{flag} {old}")
        _PENDING.append(f"flag value {flag} {old} is deprecated; use {flag} {new}")
    return new


def deprecations() -> list[str]:
    """The notices of the former spellings parsed since the last call, one line each, for the log."""
    lines = list(_PENDING)
    _PENDING.clear()
    return lines


def _shown(g: Given) -> str:
    return g.flag if isinstance(g.value, bool) else repr(g.value)


# --- settings ---------------------------------------------------------------------------------------


def _default_text(f: Field[Any], parse: Parser, defaults: Mapping[str, object], switch: bool) -> str:
    v = defaults.get(f.name, f.default if f.default is not MISSING else None)
    if isinstance(v, bool) and switch:
        return f" (default {'on' if v else 'off'})"
    if v is None or isinstance(v, bool):
        return ""
    if isinstance(v, float) and isinstance(parse, Duration):
        return f" (default {seconds_text(v)})"
    if isinstance(v, float) and v == int(v):
        v = int(v)
    return f" (default {v})"


def add_flags(
    p: argparse.ArgumentParser | argparse._ArgumentGroup,
    cls: type,
    command: str,
    section: str = "",
    defaults: Mapping[str, object] | None = None,
    only: Collection[str] | None = None,
    env: bool = True,
) -> None:
    """argparse flags for every field of `cls` (or those named in `only`) that declares one for `command`,
    `serve`'s with their former spellings; values default to None so that `overrides` can tell "not given"
    from "given as the default"."""
    for f, spec in specs(cls):
        names = spec.flags.get(command)
        if not names or (only is not None and f.name not in only):
            continue
        switch = spec.action == "switch"
        pair = names[0].startswith("--[no-]")
        value = ("=false" if names[0].startswith("--no-") else "=true") if switch and not pair else ""
        env_text = f"; env {env_name(section, f, spec)}{value}" if spec.env and env else ""
        lead = "without " if value == "=false" else ""
        text = lead + described(spec) + _default_text(f, spec.parse, defaults or {}, pair) + env_text
        old = spec.old if names == spec.flags.get("serve") else spec.check_old if command == "check" else ()
        add_flag(
            p, names, flag_dest(section, f), old=old, switch=switch, parse=spec.parse, help=text, metavar=spec.metavar
        )


def overrides(
    cls: type,
    args: argparse.Namespace,
    command: str,
    errors: list[str],
    section: str = "",
    environ: Mapping[str, str] | None = None,
) -> dict[str, object]:
    """{field: value} from the flags given (else the environment variables set), errors named by them."""
    out: dict[str, object] = {}
    for f, spec in specs(cls):
        names = spec.flags.get(command)
        raw = getattr(args, flag_dest(section, f), None) if names else None
        label = names[0] if names else ""
        if raw is not None and spec.action == "switch":
            out[f.name] = bool(raw)
            continue
        if raw is None and spec.env and environ is not None:  # the variable, else its former name
            label = next(
                (n for n in (env_name(section, f, spec), *old_env_names(section, f, spec)) if n in environ), ""
            )
            raw = environ.get(label)
        if raw is None:
            continue
        try:
            out[f.name] = spec.parse(raw, True)
        except ValueError as e:
            errors.append(f"{label}: {e}")
    return out

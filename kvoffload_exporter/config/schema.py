"""Declarative settings: each field of a frozen settings dataclass declares its type and bounds (a parser),
YAML key, command-line flag(s), environment variable, default and help exactly once.

From that one declaration this module validates a YAML mapping (every error at once, "did you mean"
for unknown keys, `section: false` as shorthand for `section.enabled: false`) and names each setting's
environment variable; config/flags.py builds the command-line flags from it. Pure: no I/O.
"""

from __future__ import annotations

import difflib
import math
import re
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import Field, dataclass, field, fields, replace
from typing import Any, Literal, TypeVar

T = TypeVar("T")
Parser = Callable[[object, bool], object]  # (raw value, came from text: flag or env) -> value, or ValueError
Action = Literal["value", "switch"]  # flag takes a value | is a boolean switch (what each name sets: flags.py)
ENV_PREFIX = "KVOFFLOAD_"
MAX_SECONDS = 366 * 86400.0  # a year: longer durations are typos (`1e20h`) and overflow timers


class ConfigError(ValueError):
    """Invalid configuration; `errors` lists every problem found, not just the first."""

    def __init__(self, errors: list[str]):
        # One problem: one line (scripts and log collectors read it whole); several: one per line.
        # No space before the line break: the first line is exactly "invalid configuration:".
        text = f" {errors[0]}" if len(errors) == 1 else "\n  - " + "\n  - ".join(errors)
        super().__init__(f"invalid configuration:{text}")
        self.errors = errors


@dataclass(frozen=True)
class Spec:
    parse: Parser
    help: str
    key: str = ""  # YAML key in its section, dotted for a sub-section ("host.enabled"); "" = field name
    flags: Mapping[str, tuple[str, ...]] = field(default_factory=dict)  # command → (flag, *aliases)
    old: tuple[str, ...] = ()  # `serve`'s former spellings: hidden aliases that say what replaces them
    check_old: tuple[str, ...] = ()  # `check`'s former spellings, the same way
    env: bool = True  # read KVOFFLOAD_<SECTION>_<KEY> too
    metavar: str | None = None
    action: Action = "value"
    yaml: bool = True


def setting(
    default: T,
    parse: Parser,
    help: str,
    *,
    key: str = "",
    flag: str | tuple[str, ...] | None = None,
    check_flag: str | tuple[str, ...] | None = None,
    demo_flag: bool = False,
    old: str | tuple[str, ...] = (),
    check_old: str | tuple[str, ...] = (),
    env: bool = True,
    metavar: str | None = None,
    action: Action = "value",
    yaml: bool = True,
) -> T:
    """A dataclass field carrying its Spec; `flag` is the `serve` flag (`old` its former spellings),
    `check_flag` the `check` one; `demo_flag`: `demo` offers the setting too, spelt as `serve` spells it."""
    flags: dict[str, tuple[str, ...]] = {}
    for cmd, f in (("serve", flag), ("check", check_flag), ("demo", flag if demo_flag else None)):
        if f:
            flags[cmd] = (f,) if isinstance(f, str) else f
    olds = tuple((o,) if isinstance(o, str) else o for o in (old, check_old))
    spec = Spec(parse, help, key, flags, olds[0], olds[1], env, metavar, action, yaml)
    result: T = field(default=default, metadata={"spec": spec})
    return result


def apply(obj: T, values: Mapping[str, object]) -> T:
    """`dataclasses.replace` with values the declared parsers have already typed and checked."""
    return replace(obj, **values)  # type: ignore[type-var]


def specs(cls: type) -> Iterator[tuple[Field[Any], Spec]]:
    for f in fields(cls):
        spec = f.metadata.get("spec")
        if isinstance(spec, Spec):
            yield f, spec


def yaml_key(f: Field[Any], spec: Spec) -> str:
    return spec.key or f.name


def _key_env_name(section: str, f: Field[Any], spec: Spec) -> str:
    path = ([section] if section else []) + yaml_key(f, spec).split(".")
    return ENV_PREFIX + "_".join(path).upper()


def env_name(section: str, f: Field[Any], spec: Spec) -> str:
    """A setting's variable follows its `serve` flag (`--state.window` is KVOFFLOAD_STATE_WINDOW,
    `--[no-]collector.gpu` KVOFFLOAD_COLLECTOR_GPU); a setting without a flag, its YAML key."""
    flag = next(iter(spec.flags.get("serve", ())), "")
    name = flag.removeprefix("--[no-]").removeprefix("--")
    if not name or flag.startswith("--no-"):
        return _key_env_name(section, f, spec)
    return ENV_PREFIX + name.replace(".", "_").replace("-", "_").upper()


def old_env_names(section: str, f: Field[Any], spec: Spec) -> tuple[str, ...]:
    """The variable's former name where it followed the YAML key (KVOFFLOAD_WINDOW): still read, hidden,
    with one deprecation line (variables.renamed_variables)."""
    old = _key_env_name(section, f, spec)
    return (old,) if old != env_name(section, f, spec) else ()


# --- parsers: each returns the typed value or raises ValueError("must ...") -----------------------


def _number(v: object, text: bool, kind: str) -> float:
    if isinstance(v, str) and text:
        try:
            v = int(v) if kind == "integer" else float(v)
        except ValueError:
            raise ValueError(f"must be {'an' if kind == 'integer' else 'a'} {kind}, got {v!r}") from None
    if isinstance(v, bool) or not isinstance(v, (int, float)) or (kind == "integer" and not isinstance(v, int)):
        raise ValueError(f"must be {'an' if kind == 'integer' else 'a'} {kind}")
    if not math.isfinite(v):
        raise ValueError(f"must be a finite {kind}, got {v!r}")
    return v


def integer(lo: int | None = None, hi: int | None = None, optional: bool = False) -> Parser:
    def parse(v: object, text: bool) -> object:
        if v is None or (optional and v == "unlimited") or (text and optional and v in ("", "none")):
            if optional:
                return None
            raise ValueError("must be an integer")
        n = int(_number(v, text, "integer"))
        if (lo is not None and n < lo) or (hi is not None and n > hi):
            raise ValueError(_bounds("an integer", lo, hi, n))
        return n

    return parse


def number(lo: float | None = None, hi: float | None = None, *, lo_open: bool = False, hi_open: bool = False) -> Parser:
    def parse(v: object, text: bool) -> object:
        x = float(_number(v, text, "number"))
        if lo is not None and (x < lo or (lo_open and x == lo)):
            raise ValueError(_bounds("a number", lo, hi, x, lo_open, hi_open))
        if hi is not None and (x > hi or (hi_open and x == hi)):
            raise ValueError(_bounds("a number", lo, hi, x, lo_open, hi_open))
        return x

    return parse


def human(x: float) -> str:
    """A number as people read it in an error: `2,147,483,648`, `0.25`, never `2.14748e+09`."""
    if float(x).is_integer() and abs(x) < 1e18:
        return f"{int(x):,}"
    return f"{x:,.15g}"


def _bounds(
    what: str, lo: float | None, hi: float | None, got: float, lo_open: bool = False, hi_open: bool = False
) -> str:
    low = f"{'>' if lo_open else '>='} {human(lo)}" if lo is not None else ""
    high = f"{'<' if hi_open else '<='} {human(hi)}" if hi is not None else ""
    if lo is not None and hi is not None:
        span = f"from {human(lo)} to {human(hi)}" if not (lo_open or hi_open) else f"{low} and {high}"
        return f"must be {what} {span}, got {human(got)}"
    return f"must be {what} {low or high}, got {human(got)}"


def did_you_mean(word: object, known: Iterable[str]) -> str:
    """` (did you mean 'x'?)` for the closest known name, or "" when none is close."""
    hint = difflib.get_close_matches(str(word), list(known), n=1, cutoff=0.6)
    return f" (did you mean {hint[0]!r}?)" if hint else ""


_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}


def boolean(v: object, text: bool) -> object:
    if text and isinstance(v, str) and v.lower() in _TRUE | _FALSE:
        return v.lower() in _TRUE
    if not isinstance(v, bool):
        raise ValueError("must be true or false")
    return v


def string(optional: bool = False) -> Parser:
    def parse(v: object, text: bool) -> object:
        if v is None and optional:
            return None
        if not isinstance(v, str) or not v.strip():
            raise ValueError("must be a non-empty string")
        return v

    return parse


def described(spec: Spec) -> str:
    """A setting's help with its closed set of values, where it has one: `log line format (text, logfmt, json)`."""
    values = getattr(spec.parse, "choices", None)
    return f"{spec.help} ({', '.join(values)})" if values else spec.help


def choice(*values: str) -> Parser:
    def parse(v: object, text: bool) -> object:
        if v not in values:
            raise ValueError(f"must be one of {', '.join(values)}, got {v!r}" + did_you_mean(v, values))
        return v

    parse.choices = values  # type: ignore[attr-defined]  # listed by --help and docs (described())
    return parse


_DUR = re.compile(r"^(\d+(?:\.\d+)?)\s*(ms|s|m|h|d|w|y)?$")
_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 604800.0, "y": 31536000.0, None: 1.0}
PROMETHEUS_DURATION = re.compile(r"^(?=\d)(\d+y)?(\d+w)?(\d+d)?(\d+h)?(\d+m)?(\d+s)?(\d+ms)?$")
"""Prometheus's duration grammar: whole numbers with units from the largest down, each unit at most once."""
_ORDER = ("y", "w", "d", "h", "m", "s", "ms")  # PROMETHEUS_DURATION's groups
DURATION_EXAMPLES = "use e.g. 5 (seconds), 500ms, 30s, 5m, 1h30m"


def parse_duration(v: object) -> float:
    """The one duration grammar of every command and file: a number of seconds (5, 2.5, "5") or a Prometheus
    duration ("500ms", "30s", "1h30m", "1d"; one unit may take a fraction: "1.5h") → seconds; never NaN,
    infinite or longer than a year."""
    if isinstance(v, bool):
        raise ValueError(f"not a duration: {v!r}")
    if isinstance(v, (int, float)):
        seconds = float(v)
        if not math.isfinite(seconds):
            raise ValueError(f"not a duration: {v!r} ({DURATION_EXAMPLES})")
    else:
        text = str(v).strip()
        m, parts = _DUR.match(text), PROMETHEUS_DURATION.match(text)
        if m:
            seconds = float(m.group(1)) * _UNITS[m.group(2)]
        elif parts:
            seconds = sum(float(p[: -len(u)]) * _UNITS[u] for p, u in zip(parts.groups(), _ORDER) if p)
        else:
            raise ValueError(f"not a duration: {v!r} ({DURATION_EXAMPLES})")
    if seconds > MAX_SECONDS:
        raise ValueError(f"not a sensible duration: {v!r} (at most 366d)")
    return seconds


def prometheus_duration(v: object) -> str:
    """A duration as Prometheus writes it (rules, `for:`, range selectors): text already in its grammar is kept
    as written, any other duration (`2`, `90.5`, `1.5h`) is converted (`2s`, `1m30s500ms`, `1h30m`).
    ValueError when not a duration or finer than a millisecond."""
    text = str(v).strip()
    if PROMETHEUS_DURATION.match(text):
        return text
    ms = parse_duration(text) * 1000.0
    if ms < 0 or abs(ms - round(ms)) > 1e-6:
        raise ValueError(f"not a duration Prometheus can write: {v!r} (whole milliseconds)")
    left, out = round(ms), ""
    for unit, size in (("d", 86_400_000), ("h", 3_600_000), ("m", 60_000), ("s", 1000), ("ms", 1)):
        if left >= size:
            out += f"{left // size}{unit}"
            left %= size
    return out or "0s"


class Duration:
    """Parser of a duration in seconds (a class, so help and docs can print defaults as `5m`)."""

    def __init__(self, positive: bool = True, at_least: float = 0.0):
        self.positive, self.at_least = positive, at_least

    def __call__(self, v: object, text: bool) -> object:
        seconds = parse_duration(v)
        if seconds < 0 or (self.positive and seconds == 0):
            raise ValueError(f"must be {'> 0' if self.positive else '>= 0'}, got {v!r}")
        if seconds < self.at_least:
            raise ValueError(f"must be at least {self.at_least:g}s, got {v!r}")
        return seconds


duration = Duration


def seconds_text(v: float) -> str:
    """300 → "5m", 0.5 → "0.5s": how help and docs show a duration."""
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if v >= size and v % size == 0:
            return f"{int(v // size)}{unit}"
    return f"{v:g}s"


# --- YAML sections ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Where:
    """How errors name a key: `window:`, `canary.interval:` or `targets[0]: pidfile`."""

    section: str = ""
    dotted: bool = True

    def key(self, k: str) -> str:
        if not self.section:
            return f"{k}:"
        return f"{self.section}.{k}:" if self.dotted else f"{self.section}: {k}"

    def unknown(self, k: object, known: list[str]) -> str:
        return (f"{self.section}: " if self.section else "") + f"unknown key {k!r}" + did_you_mean(k, known)


def _flatten(raw: Mapping[str, object], subs: set[str], where: Where, errors: list[str]) -> dict[str, object]:
    """{"host": {"enabled": x}} → {"host.enabled": x}; `host: false` → {"host.enabled": False}."""
    flat: dict[str, object] = {}
    for k, v in raw.items():
        if k not in subs:
            flat[k] = v
        elif isinstance(v, bool):
            flat[f"{k}.enabled"] = v
        elif v is None:
            continue
        elif not isinstance(v, Mapping):
            errors.append(f"{where.key(k)} must be a mapping (or true/false)")
        else:
            flat.update({f"{k}.{sk}": sv for sk, sv in v.items()})
    return flat


def parse_section(
    cls: type, raw: Mapping[str, object], where: Where, errors: list[str], extra: tuple[str, ...] = ()
) -> dict[str, object]:
    """Validate one YAML mapping against `cls`'s declared fields → {field name: typed value}.

    Keys in `extra` are allowed and left to the caller (e.g. `targets`)."""
    by_key = {yaml_key(f, s): (f, s) for f, s in specs(cls) if s.yaml}
    subs = {k.split(".", 1)[0] for k in by_key if "." in k}
    flat = _flatten(raw, subs, where, errors)
    known = sorted({k.split(".", 1)[0] for k in by_key} | set(extra) | set(by_key))
    out: dict[str, object] = {}
    for k, v in flat.items():
        if k in extra:
            continue
        if k not in by_key:
            errors.append(where.unknown(k, known))
            continue
        f, spec = by_key[k]
        try:
            out[f.name] = spec.parse(v, False)
        except ValueError as e:
            index, _, rest = str(e).partition(" ")  # "[2] must be …" names a list entry: key[2]
            errors.append(f"{where.key(k + index)} {rest}" if index.startswith("[") else f"{where.key(k)} {e}")
    return out
